// The tensor ops of the transformer issue, beyond what the goldens compare with PyTorch:
// edge cases (empty, 0-d, out-of-range diagonals, NaN and ties in topk), the errors users
// see, determinism of the scatter-adds at any thread count, and multinomial's distribution
// (its draws differ from PyTorch's generator, so it is tested against the probabilities).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <map>
#include <tessera/tessera.h>
#include <tessera/tensor/native.h>
#include "test_support.h"

namespace ts = tessera;
using ts::DType;
using ts::Shape;
using ts::Tensor;

using test_support::contains;
using test_support::error_of;

namespace {

Tensor floats(const std::vector<float>& values, const Shape& shape) { return ts::tensor<float>(values, shape); }
Tensor longs(const std::vector<int64_t>& values, const Shape& shape = {-1}) { return ts::tensor<int64_t>(values, shape); }

// Pearson's chi-square statistic of observed counts against expected probabilities.
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probabilities, int64_t total) {
  double statistic = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double expected = probabilities[i] * static_cast<double>(total);
    statistic += (static_cast<double>(counts[i]) - expected) * (static_cast<double>(counts[i]) - expected) / expected;
  }
  return statistic;
}

}  // namespace

TEST_CASE("masked_fill: broadcasting both ways, any dtype, a causal mask for softmax") {
  Tensor x = floats({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(x.masked_fill(ts::tensor<bool>({true, false, true}), -1).to_vector<float>() ==
        std::vector<float>{-1, 2, -1, -1, 5, -1});
  Tensor wide = ts::masked_fill(floats({1, 2}, {2, 1}), ts::tensor<bool>({false, true, true, false}, {2, 1, 2}), 9);
  CHECK(wide.sizes() == Shape{2, 2, 2});
  CHECK(wide.to_vector<float>() == std::vector<float>{1, 9, 2, 9, 9, 1, 9, 2});
  CHECK(ts::arange(3).masked_fill(ts::tensor<bool>({false, true, false}), 7).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 7, 2});
  // GPT's causal attention: -inf above the diagonal, then softmax over the last dim.
  const int64_t T = 4;
  Tensor causal = ts::ones({T, T}, {.dtype = DType::boolean}).tril();
  Tensor scores = ts::zeros({T, T}).masked_fill(~causal, -std::numeric_limits<double>::infinity());
  Tensor attention = scores.softmax(-1);
  CHECK(attention.at<float>({0, 0}) == 1.0f);
  CHECK(attention.at<float>({0, 1}) == 0.0f);
  CHECK(attention.at<float>({3, 2}) == doctest::Approx(0.25));
  CHECK(contains(error_of([&] { x.masked_fill(ts::ones({3}, {.dtype = DType::u8}), 0); }),
                 "masked_fill: mask must be bool, got uint8 of shape [3]"));
  std::string shapes = error_of([&] { x.masked_fill(ts::ones({4}, {.dtype = DType::boolean}), 0); });
  CHECK(contains(shapes, "[2, 3]"));
  CHECK(contains(shapes, "[4]"));
}

TEST_CASE("tril and triu: diagonals, batches, bool, out-of-range diagonals") {
  Tensor m = ts::arange(1, 13, 1, {.dtype = DType::f32}).view({3, 4});
  CHECK(m.tril().to_vector<float>() == std::vector<float>{1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0});
  CHECK(m.triu(1).to_vector<float>() == std::vector<float>{0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12});
  CHECK(ts::tril(m, -1).to_vector<float>() == std::vector<float>{0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0});
  CHECK(m.tril(10).to_vector<float>() == m.to_vector<float>());
  CHECK(m.triu(10).sum().item<float>() == 0.0f);
  CHECK(m.tril(-10).sum().item<float>() == 0.0f);
  CHECK(m.t().triu().to_vector<float>() == std::vector<float>{1, 5, 9, 0, 6, 10, 0, 0, 11, 0, 0, 0});
  Tensor batch = ts::ones({2, 2, 2}).triu();
  CHECK(batch.to_vector<float>() == std::vector<float>{1, 1, 0, 1, 1, 1, 0, 1});
  CHECK(ts::ones({3, 3}, {.dtype = DType::boolean}).tril().sum().item<int64_t>() == 6);
  CHECK(ts::zeros({0, 3}).tril().sizes() == Shape{0, 3});
  CHECK(contains(error_of([&] { ts::ones({4}).tril(); }), "tril: expected a tensor of at least 2 dims"));
}

TEST_CASE("flip: values over several dims, negative dims, any dtype, the gradient, the errors") {
  Tensor x = ts::arange(24, {.dtype = DType::f32}).view({2, 3, 4});
  Tensor out = ts::flip(x, {0, 2});
  CHECK(out.sizes() == Shape{2, 3, 4});
  CHECK(out.is_contiguous());
  const std::vector<float> got = out.to_vector<float>();
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      for (int64_t k = 0; k < 4; ++k) {
        CAPTURE(i); CAPTURE(j); CAPTURE(k);
        CHECK(got[(i * 3 + j) * 4 + k] == static_cast<float>((1 - i) * 12 + j * 4 + (3 - k)));
      }
    }
  }
  CHECK(ts::flip(x, {-1, -3}).to_vector<float>() == got);           // negative dims, any order
  CHECK(ts::flip(x, {}).to_vector<float>() == x.to_vector<float>());  // no dims: a copy
  CHECK(ts::flip(x, {1}).storage() != x.storage());
  // A non-contiguous input, integers and bool.
  Tensor m = ts::arange(6).view({2, 3});
  CHECK(ts::flip(m.t(), {0}).to_vector<int64_t>() == std::vector<int64_t>{2, 5, 1, 4, 0, 3});
  CHECK(ts::flip(ts::tensor<bool>({true, false, false}), {0}).to_vector<bool>() == std::vector<bool>{false, false, true});
  CHECK(ts::flip(ts::zeros({0, 3}), {0, 1}).sizes() == Shape{0, 3});
  CHECK(ts::flip(ts::full({}, 5.0), {0}).item<float>() == 5.0f);
  // The gradient is the upstream gradient flipped over the same dims.
  Tensor leaf = ts::arange(24, {.dtype = DType::f64}).view({2, 3, 4}).detach().requires_grad_();
  Tensor weight = ts::arange(24, {.dtype = DType::f64}).view({2, 3, 4}) * 0.5;
  (ts::flip(leaf, {0, -1}) * weight).sum().backward();
  CHECK(leaf.grad().to_vector<double>() == ts::flip(weight, {0, 2}).to_vector<double>());

  CHECK(error_of([&] { ts::flip(x, {3}); }) == "flip: dim 3 is out of range for a tensor of 3 dimensions");
  CHECK(error_of([&] { ts::flip(x, {-4}); }) == "flip: dim -4 is out of range for a tensor of 3 dimensions");
  CHECK_THROWS_AS(ts::flip(x, {3}), ts::IndexError);
  CHECK(error_of([&] { ts::flip(x, {0, -3}); }) == "flip: dim 0 appears multiple times in the list of dims [0, -3]");
  CHECK_THROWS_AS(ts::flip(x, {1, 1}), ts::ValueError);
}

TEST_CASE("split and chunk: views with PyTorch's piece sizes") {
  Tensor x = ts::arange(10, {.dtype = DType::f32}).view({2, 5});
  std::vector<Tensor> by_size = x.split(2, 1);
  REQUIRE(by_size.size() == 3);
  CHECK(by_size[2].sizes() == Shape{2, 1});
  CHECK(by_size[1].to_vector<float>() == std::vector<float>{2, 3, 7, 8});
  CHECK(by_size[0].storage() == x.storage());  // views
  std::vector<Tensor> by_sizes = ts::split(x, std::vector<int64_t>{1, 4}, -1);
  CHECK(by_sizes[1].to_vector<float>() == std::vector<float>{1, 2, 3, 4, 6, 7, 8, 9});
  // chunk: ceil(size / chunks) per piece, so 6 split 4 ways is 3 pieces of 2.
  CHECK(ts::arange(6).chunk(4).size() == 3);
  CHECK(ts::arange(5).chunk(3)[2].to_vector<int64_t>() == std::vector<int64_t>{4});
  CHECK(ts::zeros({0}).chunk(3).size() == 3);
  CHECK(contains(error_of([&] { x.split(std::vector<int64_t>{2, 2}, 1); }),
                 "split: sizes [2, 2] sum to 4 but dim 1 of shape [2, 5] has size 5"));
  CHECK_THROWS_AS(x.split(0, 1), ts::ValueError);
  CHECK_THROWS_AS(x.chunk(0), ts::ValueError);
}

TEST_CASE("index_select and gather: values and the errors naming the bad index") {
  Tensor x = ts::arange(12, {.dtype = DType::f64}).view({3, 4});
  CHECK(x.index_select(1, longs({3, 0, 3})).to_vector<double>() == std::vector<double>{3, 0, 3, 7, 4, 7, 11, 8, 11});
  CHECK(x.index_select(0, longs({2})).to_vector<double>() == std::vector<double>{8, 9, 10, 11});
  CHECK(x.index_select(0, longs({})).sizes() == Shape{0, 4});
  CHECK(ts::tensor<bool>({true, false, true}).index_select(0, longs({2, 1})).to_vector<bool>() ==
        std::vector<bool>{true, false});
  CHECK(x.gather(1, longs({1, 1, 0, 3, 2, 0}, {3, 2})).to_vector<double>() == std::vector<double>{1, 1, 4, 7, 10, 8});
  CHECK(x.gather(0, longs({2, 0, 1}, {1, 3})).to_vector<double>() == std::vector<double>{8, 1, 6});
  CHECK(x.t().gather(0, longs({3, 0}, {1, 2})).to_vector<double>() == std::vector<double>{3, 4});

  CHECK(error_of([&] { x.index_select(1, longs({0, 4})); }) ==
        "index_select: index 4 at position 1 is out of range for dim 1 of size 4 (shape [3, 4])");
  CHECK(contains(error_of([&] { x.index_select(0, longs({-1})); }), "index -1 at position 0"));
  CHECK(contains(error_of([&] { x.index_select(0, ts::zeros({2})); }), "index_select: index must be int64, got float32"));
  CHECK(contains(error_of([&] { x.index_select(0, longs({0, 1}, {1, 2})); }), "index must be 1-D"));
  CHECK(error_of([&] { x.gather(1, longs({0, 1, 2, 9}, {2, 2})); }) ==
        "gather: index 9 at [1, 1] of the index of shape [2, 2] is out of range for dim 1 of size 4 (self of shape "
        "[3, 4])");
  CHECK(contains(error_of([&] { x.gather(0, longs({0, 0, 0, 0, 0}, {1, 5})); }),
                 "gather: index of shape [1, 5] is larger than self of shape [3, 4] in dim 1"));
  CHECK(contains(error_of([&] { x.gather(0, longs({0})); }), "must have as many dims as self"));
}

TEST_CASE("scatter_add and index_add_: sums at repeated indices, the same bits at any thread count") {
  Tensor base = ts::zeros({2, 3});
  Tensor out = base.scatter_add(1, longs({0, 0, 2, 1, 1, 1}, {2, 3}), floats({1, 2, 3, 4, 5, 6}, {2, 3}));
  CHECK(out.to_vector<float>() == std::vector<float>{3, 0, 3, 0, 15, 0});
  CHECK(base.sum().item<float>() == 0.0f);  // out of place
  Tensor into = ts::zeros({4, 2});
  ts::native::index_add_(into, 0, longs({3, 0, 3}), floats({1, 2, 3, 4, 5, 6}, {3, 2}));
  CHECK(into.to_vector<float>() == std::vector<float>{3, 4, 0, 0, 0, 0, 6, 8});
  CHECK(contains(error_of([&] { ts::zeros({2, 3}).scatter_add(0, longs({2}, {1, 1}), ts::ones({1, 1})); }),
                 "scatter_add: index 2 at [0, 0]"));

  // Many float32 terms land on few rows, so another order of addition would change the
  // bits: the backward of index_select and gather must give identical gradients at 1 and 2
  // threads (large enough for the parallel paths).
  ts::Generator gen(5);
  const Tensor weights = ts::randn({50, 64}, gen);
  const Tensor rows = ts::randint(0, 50, {20000}, gen);
  const Tensor picks = ts::randint(0, 50, {6000, 64}, gen);
  const Tensor upstream_rows = ts::randn({20000, 64}, gen), upstream_picks = ts::randn({6000, 64}, gen);
  auto gradients = [&](int threads) {
    const int previous = ts::get_num_threads();
    ts::set_num_threads(threads);
    Tensor w = weights.clone().requires_grad_();
    ((w.index_select(0, rows) * upstream_rows).sum() + (w.gather(0, picks) * upstream_picks).sum()).backward();
    ts::set_num_threads(previous);
    return w.grad().to_vector<float>();
  };
  const std::vector<float> one_thread = gradients(1);
  CHECK(one_thread == gradients(2));
  CHECK(std::abs(one_thread[0]) > 0.0f);
}

TEST_CASE("topk: order, NaN as the largest, ties by position, every dim and dtype") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = floats({1, 3, 3, nan, 2, -0.0f, 0.0f}, {7});
  auto [values, indices] = x.topk(4);
  CHECK(std::isnan(values.to_vector<float>()[0]));
  CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{3, 1, 2, 4});
  CHECK(indices.dtype() == DType::i64);
  auto [low, low_at] = ts::topk(x, 3, 0, /*largest=*/false);
  CHECK(low_at.to_vector<int64_t>() == std::vector<int64_t>{5, 6, 0});  // -0 and 0 tie: by position
  CHECK(low.to_vector<float>() == std::vector<float>{-0.0f, 0.0f, 1.0f});
  CHECK(std::signbit(low.to_vector<float>()[0]));  // the values themselves are kept
  Tensor m = floats({5, 1, 4, 2, 8, 6}, {2, 3});
  CHECK(std::get<1>(m.topk(1, 0)).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1});
  CHECK(std::get<0>(m.t().topk(2, 1, false)).to_vector<float>() == std::vector<float>{2, 5, 1, 8, 4, 6});
  CHECK(std::get<0>(longs({4, -7, 9}).topk(2)).to_vector<int64_t>() == std::vector<int64_t>{9, 4});
  CHECK(std::get<0>(m.topk(0, 1)).sizes() == Shape{2, 0});
  CHECK(std::get<0>(ts::full({}, 2.5).topk(1)).item<float>() == 2.5f);
  CHECK(error_of([&] { m.topk(4, 1); }) == "topk: k = 4 is out of range for dim 1 of size 3 (shape [2, 3])");
  CHECK_THROWS_AS(ts::tensor<bool>({true}).topk(1), ts::DTypeError);
}

TEST_CASE("cumsum: running sums in the input's dtype, int64 for integers and bool") {
  Tensor x = floats({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(x.cumsum(1).to_vector<float>() == std::vector<float>{1, 3, 6, 4, 9, 15});
  CHECK(ts::cumsum(x, 0).to_vector<float>() == std::vector<float>{1, 2, 3, 5, 7, 9});
  CHECK(x.t().cumsum(-1).to_vector<float>() == std::vector<float>{1, 5, 2, 7, 3, 9});
  CHECK(ts::native::cumsum(x, 1, /*reverse=*/true).to_vector<float>() == std::vector<float>{6, 5, 3, 15, 11, 6});
  CHECK(ts::tensor<uint8_t>({200, 100}).cumsum(0).to_vector<int64_t>() == std::vector<int64_t>{200, 300});
  Tensor count = ts::tensor<bool>({true, false, true}).cumsum(0);
  CHECK(count.dtype() == DType::i64);
  CHECK(count.to_vector<int64_t>() == std::vector<int64_t>{1, 1, 2});
  // float32 rows accumulate in double: 1 + 1e8 ones is not lost in float rounding.
  Tensor ones = ts::ones({3});
  ones = ts::cat({ts::full({1}, 1e8), ones});
  CHECK(ones.cumsum(0).to_vector<float>().back() == 1e8f + 3.0f);
}

TEST_CASE("searchsorted (native): PyTorch's left and right positions") {
  Tensor sorted = floats({1, 3, 3, 5, 0, 10, 20, 30}, {2, 4});
  Tensor values = floats({3, 6, 0, 30}, {2, 2});
  CHECK(ts::native::searchsorted(sorted, values, false).to_vector<int64_t>() == std::vector<int64_t>{1, 4, 0, 3});
  CHECK(ts::native::searchsorted(sorted, values, true).to_vector<int64_t>() == std::vector<int64_t>{3, 4, 1, 4});
  CHECK(ts::native::searchsorted(floats({1, 2, 3}, {3}), floats({2.5f, 0, 9}, {3, 1}), false).sizes() == Shape{3, 1});
  CHECK_THROWS_AS(ts::native::searchsorted(sorted, floats({1}, {1, 1, 1}), false), ts::ShapeError);
}

TEST_CASE("multinomial with replacement: frequencies follow the weights (chi-square)") {
  ts::Generator gen(2024);
  // Unnormalised weights, a zero one included, in two rows of different shape.
  Tensor probs = ts::tensor<double>({0.2, 0.4, 0.6, 0.8, 0.0, 3.0, 0.0, 1.0, 0.0, 0.0}, {2, 5});
  const int64_t n = 20000;
  Tensor draws = ts::multinomial(probs, n, /*replacement=*/true, gen);
  CHECK(draws.sizes() == Shape{2, n});
  CHECK(draws.dtype() == DType::i64);
  CHECK(gen.offset() == static_cast<uint64_t>(2 * n));
  const std::vector<int64_t> values = draws.to_vector<int64_t>();
  std::vector<int64_t> first(5, 0), second(5, 0);
  for (int64_t i = 0; i < n; ++i) ++first[values[i]], ++second[values[n + i]];
  CHECK(first[4] == 0);
  CHECK(second[1] == 0);
  CHECK(second[3] == 0);
  CHECK(second[4] == 0);
  // 3 degrees of freedom: P(chi2 > 16.27) = 0.001. Fixed seed: this is not flaky.
  CHECK(chi_square({first[0], first[1], first[2], first[3]}, {0.1, 0.2, 0.3, 0.4}, n) < 16.27);
  CHECK(chi_square({second[0], second[2]}, {0.75, 0.25}, n) < 10.83);  // 1 degree of freedom
  // The same generator state draws the same; the next call draws anew; float32 works too.
  ts::Generator again(2024);
  CHECK(ts::multinomial(probs, n, true, again).to_vector<int64_t>() == values);
  CHECK(ts::multinomial(probs, n, true, again).to_vector<int64_t>() != values);
  CHECK(probs.to(DType::f32).multinomial(3, true, gen).sizes() == Shape{2, 3});
  CHECK(ts::multinomial(ts::tensor<float>({0, 0, 1}), 4, true, gen).to_vector<int64_t>() ==
        std::vector<int64_t>{2, 2, 2, 2});
}

TEST_CASE("multinomial without replacement: sequential sampling's distribution (chi-square)") {
  ts::Generator gen(77);
  const int64_t rows = 30000;
  const std::vector<double> p = {0.5, 0.3, 0.2};
  Tensor probs = ts::tensor<double>(p).view({1, 3}).expand({rows, 3}).contiguous();
  Tensor draws = ts::multinomial(probs, 2, /*replacement=*/false, gen);
  CHECK(gen.offset() == static_cast<uint64_t>(rows * 3));
  const std::vector<int64_t> values = draws.to_vector<int64_t>();
  std::map<std::pair<int64_t, int64_t>, int64_t> pairs;
  int64_t repeated = 0;
  for (int64_t r = 0; r < rows; ++r) {
    repeated += values[2 * r] == values[2 * r + 1];
    ++pairs[{values[2 * r], values[2 * r + 1]}];
  }
  CHECK(repeated == 0);
  // P(first = i, second = j) = p_i * p_j / (1 - p_i); 5 degrees of freedom: P(> 20.52) = 0.001.
  std::vector<int64_t> counts;
  std::vector<double> expected;
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      if (i == j) continue;
      counts.push_back(pairs[{i, j}]);
      expected.push_back(p[i] * p[j] / (1 - p[i]));
    }
  }
  CHECK(chi_square(counts, expected, rows) < 20.52);
  // All of the categories: a permutation; zero weights are never drawn.
  Tensor all = ts::multinomial(ts::tensor<double>({0.1, 0.0, 0.9, 0.5}), 3, false, gen);
  std::vector<int64_t> drawn = all.to_vector<int64_t>();
  std::sort(drawn.begin(), drawn.end());
  CHECK(drawn == std::vector<int64_t>{0, 2, 3});
}

TEST_CASE("multinomial: invalid weights and requests are errors") {
  ts::Generator gen(1);
  CHECK(contains(error_of([&] { ts::multinomial(ts::tensor<double>({0.5, -0.1}), 1, true, gen); }),
                 "contain inf, NaN or a negative value"));
  CHECK(contains(error_of([&] { ts::multinomial(ts::tensor<double>({0.5, NAN}), 1, true, gen); }), "NaN"));
  CHECK(contains(error_of([&] { ts::multinomial(ts::tensor<double>({0, 0, 1, 0}, {2, 2}), 1, true, gen); }),
                 "a row of the [2, 2] probabilities sums to 0"));
  CHECK(contains(error_of([&] { ts::multinomial(ts::tensor<double>({0.5, 0, 0.5}), 3, false, gen); }),
                 "without replacement, 3 samples need as many categories of positive probability"));
  CHECK(contains(error_of([&] { ts::multinomial(ts::tensor<double>({0.5, 0.5}), 3, false, gen); }),
                 "cannot draw 3 samples without replacement from 2 categories"));
  CHECK_THROWS_AS(ts::multinomial(ts::tensor<double>({1.0}), 0, true, gen), ts::ValueError);
  CHECK_THROWS_AS(ts::multinomial(ts::ones({2, 2, 2}), 1, true, gen), ts::ShapeError);
  CHECK_THROWS_AS(ts::multinomial(ts::ones({2}, {.dtype = DType::i64}), 1, true, gen), ts::DTypeError);
  CHECK(gen.offset() == 0);  // failed draws take no numbers
}

TEST_CASE("losses on [N, C, d1, ...] and label smoothing: shapes, ignore_index, errors") {
  ts::Generator gen(3);
  Tensor logits = ts::randn({2, 4, 3}, gen, {.dtype = DType::f64});
  Tensor target = longs({0, 3, -100, 1, 1, 2}, {2, 3});
  CHECK(ts::cross_entropy(logits, target, {.reduction = ts::Reduction::none}).sizes() == Shape{2, 3});
  CHECK(ts::cross_entropy(logits, target, {.reduction = ts::Reduction::none}).at<double>({0, 2}) == 0.0);
  // The [N, C, d] loss is the [N * d, C] loss of the same rows.
  Tensor rows = logits.permute({0, 2, 1}).reshape({6, 4});
  const double mean = ts::cross_entropy(logits, target, {.label_smoothing = 0.1}).item<double>();
  CHECK(mean == doctest::Approx(ts::cross_entropy(rows, target.reshape({6}), {.label_smoothing = 0.1}).item<double>())
                    .epsilon(1e-14));
  // Label smoothing by hand for one row: (1 - s) * nll + s / C * sum_c -log p_c.
  Tensor one = ts::tensor<double>({1.0, 2.0, 0.5});
  Tensor log_p = one.log_softmax(0);
  const double expected = 0.8 * -log_p.at<double>({1}) + 0.2 / 3 * -log_p.sum().item<double>();
  CHECK(ts::cross_entropy(one, ts::full({}, 1, {.dtype = DType::i64}), {.label_smoothing = 0.2}).item<double>() ==
        doctest::Approx(expected).epsilon(1e-14));
  CHECK(contains(error_of([&] { ts::cross_entropy(logits, target, {.label_smoothing = 1.5}); }),
                 "label_smoothing must be in [0, 1], got 1.5"));
  CHECK(contains(error_of([&] { ts::cross_entropy(logits, ts::zeros({2, 3})); }),
                 "class-probability targets are not implemented"));
  CHECK(error_of([&] { ts::nll_loss(logits, longs({0, 1}, {2})); }) ==
        "nll_loss: target of shape [2] does not match input of shape [2, 4, 3] (expected target shape [2, 3])");
  CHECK(contains(error_of([&] { ts::nll_loss(logits, longs({0, 4, 1, 1, 1, 1}, {2, 3})); }),
                 "nll_loss: target 4 at position 1 is out of range for 4 classes"));
}
