// The layers, initialisers and factories a model author missed (issue 29), beyond the
// values the PyTorch golden checks (tests/golden/test_model_ops_golden.cpp): PyTorch's
// parameter names and shapes, initialisation bounds and moments, printing, the
// BatchNorm1d running statistics, randperm, and the errors bad input gets.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <tessera/tessera.h>

namespace ts = tessera;
namespace nn = tessera::nn;
using ts::DType;
using ts::Tensor;

namespace {

std::vector<std::string> state_names(nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : module.state_dict()) names.push_back(name);
  return names;
}

std::string printed(const nn::Module& module) {
  std::ostringstream out;
  out << module;
  return out.str();
}

double max_abs(const Tensor& t) { return ts::abs(t).max().item<double>(); }

}  // namespace

TEST_CASE("Conv1d: PyTorch's shapes, names, init bound and printing; unbatched input") {
  ts::manual_seed(3);
  nn::Conv1d conv(4, 6, 3, {.padding = 1});
  CHECK(state_names(conv) == std::vector<std::string>{"weight", "bias"});
  CHECK(conv.weight.sizes() == ts::Shape{6, 4, 3});
  // kaiming_uniform with a = sqrt(5): bound 1 / sqrt(fan_in) = 1 / sqrt(12) for both.
  const double bound = 1.0 / std::sqrt(12.0);
  CHECK(max_abs(conv.weight) <= bound);
  CHECK(max_abs(conv.weight) > 0.8 * bound);
  CHECK(max_abs(conv.bias) <= bound);
  CHECK(printed(conv) == "Conv1d(4, 6, kernel_size=(3,), stride=(1,), padding=(1,))");
  Tensor x = ts::randn({2, 4, 10});
  CHECK(conv(x).sizes() == ts::Shape{2, 6, 10});
  CHECK(ts::allclose(conv(x.select(0, 1)), conv(x).select(0, 1), 0, 0));
  CHECK_THROWS_WITH_AS(conv(ts::zeros({4})), doctest::Contains("conv1d: expected an input [N, C, L] or [C, L], got [4]"),
                       ts::ShapeError);
  ts::manual_seed(0);  // the default generator as the other tests expect it
}

TEST_CASE("AvgPool2d averages windows as F.avg_pool2d and prints like it") {
  nn::AvgPool2d pool(2);
  CHECK(printed(pool) == "AvgPool2d(kernel_size=2, stride=2, padding=0)");
  Tensor x = ts::arange(16, {.dtype = DType::f32}).view({1, 1, 4, 4});
  CHECK(pool(x).to_vector<float>() == std::vector<float>{2.5f, 4.5f, 10.5f, 12.5f});
  // Padding excluded from the count: the corner window of a 3x3 kernel, padding 1, sees 4.
  nn::AvgPool2d padded(3, {.stride = 2, .padding = 1, .count_include_pad = false});
  CHECK(padded(ts::ones({1, 1, 4, 4})).to_vector<float>() == std::vector<float>(4, 1.0f));
  nn::AvgPool2d divided(2, {.divisor_override = 1});
  CHECK(divided(x).to_vector<float>() == std::vector<float>{10, 18, 42, 50});
  CHECK_THROWS_WITH_AS(ts::avg_pool2d(x, 2, 2, 0, {.ceil_mode = true}), doctest::Contains("ceil_mode"), ts::ValueError);
}

TEST_CASE("GroupNorm: weight 1, bias 0, per-group statistics; groups must divide channels") {
  nn::GroupNorm gn(2, 4);
  CHECK(state_names(gn) == std::vector<std::string>{"weight", "bias"});
  CHECK(printed(gn) == "GroupNorm(2, 4, eps=1e-05, affine=True)");
  ts::Generator gen(5);
  Tensor x = ts::randn({3, 4, 5}, gen, {.dtype = DType::f64}) * 3.0 + 1.0;
  Tensor groups = gn(x.to(DType::f32)).to(DType::f64).reshape({3, 2, 10});
  CHECK(max_abs(groups.mean({2})) < 1e-6);
  CHECK(max_abs(groups.var({2}, 0) - 1.0) < 1e-4);  // eps 1e-5 against variances ~9
  CHECK_THROWS_WITH_AS(nn::GroupNorm(3, 4), doctest::Contains("4 channels do not split into 3 groups"), ts::ValueError);
  CHECK_THROWS_WITH_AS(gn(ts::zeros({2, 3, 5})), doctest::Contains("expected an input [N, 4, ...], got [2, 3, 5]"),
                       ts::ShapeError);
}

TEST_CASE("BatchNorm1d over [N, C] and [N, C, L]: running statistics as PyTorch, 4-D refused") {
  nn::BatchNorm1d bn(3);
  CHECK(state_names(bn) == std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                                    "num_batches_tracked"});
  CHECK(printed(bn) == "BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  // Channel c holds c + {0, 2, 4, 6}: mean c + 3, unbiased variance 20 / 3.
  std::vector<float> values;
  for (int n = 0; n < 4; ++n) {
    for (int c = 0; c < 3; ++c) values.push_back(static_cast<float>(c + 2 * n));
  }
  Tensor x = ts::tensor<float>(values, {4, 3});
  Tensor y = bn(x);
  CHECK(max_abs(y.mean({0})) < 1e-6);
  const std::vector<float> mean = bn.running_mean.to_vector<float>();
  for (int c = 0; c < 3; ++c) CHECK(mean[c] == doctest::Approx(0.1 * (c + 3)).epsilon(1e-6));
  CHECK(bn.running_var.to_vector<float>()[0] == doctest::Approx(0.9 + 0.1 * 20.0 / 3.0).epsilon(1e-6));
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  CHECK(bn(ts::randn({2, 3, 7})).sizes() == ts::Shape{2, 3, 7});
  CHECK_THROWS_WITH_AS(bn(ts::zeros({2, 3, 4, 4})),
                       doctest::Contains("BatchNorm1d '': expected an input [N, C] or [N, C, L] with C = 3, got [2, 3, 4, 4]"),
                       ts::ShapeError);
}

TEST_CASE("SiLU, Tanh and Sigmoid modules are their functions") {
  Tensor x = ts::linspace(-3, 3, 13);
  CHECK(ts::equal(nn::SiLU()(x), x * ts::sigmoid(x)));
  CHECK(ts::equal(nn::Tanh()(x), ts::tanh(x)));
  CHECK(ts::equal(nn::Sigmoid()(x), ts::sigmoid(x)));
}

TEST_CASE("nn::init: xavier bounds and moments, trunc_normal within [a, b] with the truncated moments") {
  ts::manual_seed(11);
  Tensor w = ts::empty({200, 300});
  nn::init::xavier_uniform_(w, 2.0);
  const double bound = 2.0 * std::sqrt(6.0 / 500.0);
  CHECK(max_abs(w) <= bound);
  CHECK(max_abs(w) > 0.99 * bound);
  nn::init::xavier_normal_(w);
  // 60000 draws: the standard deviation within 2% of sqrt(2 / 500).
  CHECK(w.to(DType::f64).std().item<double>() == doctest::Approx(std::sqrt(2.0 / 500.0)).epsilon(0.02));
  nn::init::trunc_normal_(w, 0.5, 2.0, -1.5, 2.5);
  CHECK(w.min().item<float>() >= -1.5f);
  CHECK(w.max().item<float>() <= 2.5f);
  // N(0.5, 2) cut at +-1 sigma: mean 0.5, standard deviation 2 * 0.5380 (the truncated
  // normal's sqrt(1 - 2 phi(1) / (Phi(1) - Phi(-1)))).
  CHECK(w.to(DType::f64).mean().item<double>() == doctest::Approx(0.5).epsilon(0.02));
  CHECK(w.to(DType::f64).std().item<double>() == doctest::Approx(2.0 * 0.5380).epsilon(0.02));
  // The same seed gives the same values; fans as PyTorch computes them.
  ts::manual_seed(11);
  Tensor again = ts::empty({200, 300});
  nn::init::xavier_uniform_(again, 2.0);
  ts::manual_seed(11);
  nn::init::xavier_uniform_(w, 2.0);
  CHECK(ts::equal(w, again));
  CHECK(nn::init::fan_in_and_fan_out(ts::empty({8, 3, 5, 5})) == std::pair<int64_t, int64_t>{75, 200});
  CHECK_THROWS_WITH_AS(nn::init::xavier_uniform_(ts::empty({5})), doctest::Contains("at least 2 dims, got [5]"),
                       ts::ShapeError);
  ts::manual_seed(0);
}

TEST_CASE("nn::init on a deferred parameter sets its rule: values keyed by name, not drawn now") {
  ts::manual_seed(0);
  nn::Linear a(30, 20), b(30, 20);
  // Bounds are absolute, as in PyTorch: (-2, 2) would not cut N(0, 0.02) at all.
  nn::init::trunc_normal_(a.weight, 0.0, 0.02, -0.04, 0.04);
  nn::init::trunc_normal_(b.weight, 0.0, 0.02, -0.04, 0.04);
  CHECK(a.weight.storage()->is_deferred());
  CHECK(ts::equal(a.weight, b.weight));  // same name and seed: same values
  CHECK(max_abs(a.weight) <= 0.04f);
  CHECK(a.weight.to(DType::f64).std().item<double>() == doctest::Approx(0.02 * 0.8796).epsilon(0.1));
}

TEST_CASE("randperm: a permutation, repeatable by seed, another for another seed") {
  ts::Generator gen(21);
  Tensor p = ts::randperm(1000, gen);
  CHECK(p.dtype() == DType::i64);
  std::vector<int64_t> values = p.to_vector<int64_t>();
  std::vector<int64_t> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> expected(1000);
  std::iota(expected.begin(), expected.end(), 0);
  CHECK(sorted == expected);
  CHECK(values != expected);
  ts::Generator same(21), other(22);
  CHECK(ts::equal(ts::randperm(1000, same), p));
  CHECK_FALSE(ts::equal(ts::randperm(1000, other), p));
  CHECK(ts::randperm(0, gen).numel() == 0);
  CHECK(ts::randperm(5, gen, {.dtype = DType::f32}).dtype() == DType::f32);
}

TEST_CASE("the new ops' errors name what was wrong") {
  Tensor x = ts::rand({3, 2});
  CHECK_THROWS_WITH_AS(ts::clamp(x, std::nullopt, std::nullopt), doctest::Contains("at least one of min and max"),
                       ts::ValueError);
  CHECK_THROWS_WITH_AS(ts::binary_cross_entropy(x * 2.0, x),
                       doctest::Contains("every element of input must be in [0, 1]"), ts::ValueError);
  CHECK_THROWS_WITH_AS(ts::mse_loss(x, ts::rand({3})), doctest::Contains("target shape [3] differs from input shape [3, 2]"),
                       ts::ShapeError);
  CHECK_THROWS_WITH_AS(ts::one_hot(ts::tensor<int64_t>({0, 5}), 4), doctest::Contains("class value 5 is not below num_classes 4"),
                       ts::IndexError);
  CHECK_THROWS_WITH_AS(ts::one_hot(ts::tensor<int64_t>({-1, 2})), doctest::Contains("must be non-negative, got -1"),
                       ts::IndexError);
  CHECK(ts::one_hot(ts::tensor<int64_t>({2, 0})).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 1, 0, 0});
  CHECK_THROWS_WITH_AS(ts::var(ts::arange(4)), doctest::Contains("var: expected a floating tensor, got int64"),
                       ts::DTypeError);
  CHECK(std::isnan(ts::var(ts::ones({1})).item<float>()));  // 0 / (N - correction = 0), as PyTorch
  CHECK(ts::isfinite(ts::arange(3)).to_vector<bool>() == std::vector<bool>{true, true, true});
  CHECK(ts::logsumexp(ts::full({3}, -INFINITY), {0}).item<float>() == -INFINITY);  // not NaN
}
