// The CPU fast paths (float32 shifted-row convolution, 2 x 2 pooling, vectorised dropout
// masks, the caching allocator) against the general code they stand in for: the f64
// im2col convolution and pooling (which the gradient checks and PyTorch goldens pin down)
// and the scalar dropout_mask_row (the definition of which elements are dropped).
// On a CPU without AVX-512, and under TESSERA_CPU_CAPABILITY=default (the tensor-default
// test), the portable kernels run instead and these tests hold them to the same bounds.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <tessera/tensor/dropout_key.h>
#include <tessera/tensor/native.h>
#include <tessera/tessera.h>

namespace ts = tessera;
namespace native = tessera::native;
using ts::DType;
using ts::Shape;
using ts::Tensor;

namespace {

Tensor uniform(const Shape& shape, uint64_t seed) {
  ts::Generator gen(seed);
  return ts::rand(shape, gen) * 2.0 - 1.0;
}

// max |a - b| / allowed over all elements, for float32 a and float64 b, where each element
// is a sum of `terms` products of values in [-1, 1]. The float32 rounding of such a sum
// grows like sqrt(terms) * 6e-8 * (the size of its partial sums, a few units here), so
// allowed = 2e-6 * sqrt(terms) * (1 + |b|): about 4x the largest error measured (1.1e-5 for
// the 576-term input gradient of the MNIST conv2), and far below the O(1) error of a wrong
// tap, index or padding.
double worst_error(const Tensor& a, const Tensor& b, int64_t terms = 1) {
  REQUIRE(a.sizes() == b.sizes());
  std::vector<double> x = a.to(DType::f64).to_vector<double>(), y = b.to_vector<double>();
  const double scale = 2e-6 * std::sqrt(static_cast<double>(terms));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / (scale * (1 + std::abs(y[i]))));
  return worst;
}

}  // namespace

TEST_CASE("float32 convolution (shifted rows) matches the float64 im2col path") {
  struct Case {
    Shape input, weight;
    bool bias;
  };
  // The MNIST layers, one input channel, odd sizes, channel counts that are not multiples
  // of the 8-row tiles, 1 x 1 and non-square kernels, and a batch smaller than the threads.
  const Case cases[] = {{{3, 32, 26, 26}, {64, 32, 3, 3}, true}, {{4, 1, 28, 28}, {32, 1, 3, 3}, true},
                        {{3, 5, 9, 7}, {11, 5, 3, 2}, true},     {{1, 3, 4, 4}, {2, 3, 3, 3}, false},
                        {{5, 2, 20, 19}, {9, 2, 1, 1}, true},     {{2, 3, 6, 33}, {4, 3, 2, 5}, true}};
  uint64_t seed = 1;
  for (const Case& c : cases) {
    CAPTURE(ts::shape_str(c.input));
    CAPTURE(ts::shape_str(c.weight));
    Tensor x = uniform(c.input, seed++), w = uniform(c.weight, seed++);
    Tensor b = c.bias ? uniform({c.weight[0]}, seed++) : Tensor();
    Tensor y = native::conv2d(x, w, b, {});
    Tensor dy = uniform(y.sizes(), seed++);
    auto [dx, dw, db] = native::conv2d_backward(dy, x, w, {}, {true, true, c.bias});

    Tensor x64 = x.to(DType::f64), w64 = w.to(DType::f64), dy64 = dy.to(DType::f64);
    Tensor b64 = c.bias ? b.to(DType::f64) : Tensor();
    const int64_t taps = c.weight[2] * c.weight[3], positions = y.size(0) * y.size(2) * y.size(3);
    CHECK(worst_error(y, native::conv2d(x64, w64, b64, {}), c.input[1] * taps + 1) <= 1.0);
    auto [dx64, dw64, db64] = native::conv2d_backward(dy64, x64, w64, {}, {true, true, c.bias});
    CHECK(worst_error(dx, dx64, c.weight[0] * taps) <= 1.0);
    CHECK(worst_error(dw, dw64, positions) <= 1.0);
    if (c.bias) CHECK(worst_error(db, db64, positions) <= 1.0);

    // The single-gradient entry points give the same values as the fused backward.
    CHECK(native::conv2d_backward_input(dy, w, x.sizes(), {}).to_vector<float>() == dx.to_vector<float>());
    CHECK(native::conv2d_backward_weight(dy, x, w.sizes(), {}).to_vector<float>() == dw.to_vector<float>());
    // Unwanted gradients come back undefined.
    auto [no_dx, only_dw, no_db] = native::conv2d_backward(dy, x, w, {}, {false, true, false});
    CHECK_FALSE(no_dx.defined());
    CHECK_FALSE(no_db.defined());
    CHECK(only_dw.to_vector<float>() == dw.to_vector<float>());
  }
}

TEST_CASE("float32 2 x 2 max pooling (AVX-512 or portable kernel) matches the general path, NaNs and ties included") {
  for (const Shape& shape : {Shape{2, 3, 24, 24}, Shape{1, 2, 7, 9}, Shape{2, 1, 5, 40}, Shape{1, 1, 2, 2}}) {
    CAPTURE(ts::shape_str(shape));
    Tensor x = uniform(shape, 11);
    // Ties (equal values in a window: the first wins), -infinity and NaN (the first NaN wins).
    std::vector<float> values = x.to_vector<float>();
    values[0] = values[1] = 0.5f;
    if (values.size() > 8) {
      values[5] = std::numeric_limits<float>::quiet_NaN();
      values[2] = -std::numeric_limits<float>::infinity();
    }
    const int64_t width = shape[3];
    if (shape[2] >= 4 && width >= 8) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      values[width + 7] = nan;  // window (0, 3): NaN last, after a greater value...
      values[6] = 2.0f;
      values[2 * width + 1] = -nan;  // window (1, 0): two NaNs (the first wins), one negative
      values[3 * width] = nan;
      values[2 * width + 2] = values[3 * width + 3] = 0.25f;  // window (1, 1): a tie on the diagonal
      values[2 * width + 3] = values[3 * width + 2] = -1.0f;
    }
    x = ts::tensor<float>(values, shape);
    auto [y, indices] = native::max_pool2d(x, {});
    auto [y64, indices64] = native::max_pool2d(x.to(DType::f64), {});  // the general loop
    CHECK(indices.to_vector<int64_t>() == indices64.to_vector<int64_t>());
    std::vector<double> a = y.to(DType::f64).to_vector<double>(), b = y64.to_vector<double>();
    for (size_t i = 0; i < a.size(); ++i) CHECK((a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))));

    Tensor dy = uniform(y.sizes(), 12);
    Tensor dx = native::max_pool2d_backward(dy, indices, shape);
    Tensor dx64 = native::max_pool2d_backward(dy.to(DType::f64), indices64, shape);
    CHECK(dx.to(DType::f64).to_vector<double>() == dx64.to_vector<double>());
  }
}

TEST_CASE("max_pool2d_backward of indices from overlapping windows takes the general path") {
  // kernel 3, stride 2, padding 1 on a 24 x 24 input also gives a 12 x 12 output, but its
  // indices leave the 2 x 2 windows; the gradient must still reach every chosen element.
  Tensor x = uniform({1, 2, 24, 24}, 21);
  auto [y, indices] = native::max_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1});
  Tensor dy = uniform(y.sizes(), 22);
  Tensor dx = native::max_pool2d_backward(dy, indices, x.sizes());
  auto [y64, indices64] = native::max_pool2d(x.to(DType::f64), {.kernel = 3, .stride = 2, .padding = 1});
  Tensor dx64 = native::max_pool2d_backward(dy.to(DType::f64), indices64, x.sizes());
  CHECK(worst_error(dx, dx64, 4) <= 1.0);
  CHECK(dx.sum().item<double>() == doctest::Approx(dy.sum().item<double>()).epsilon(1e-5));
}

TEST_CASE("vectorised dropout masks are bit-identical to dropout_mask_row") {
  const int64_t widths[] = {1, 3, 4, 5, 63, 64, 65, 128, 9216 + 7};
  const double probabilities[] = {0.0, 0.25, 0.5, 0.3, 0.999, 1.0};
  for (int64_t cols : widths) {
    for (double p : probabilities) {
      CAPTURE(cols);
      CAPTURE(p);
      native::DropoutKey key{.seed = 0x1234567890abcdefull, .stream = 77, .step = (uint64_t{5} << 32) + 9,
                             .first_row = 1000};
      Tensor x = ts::ones({3, cols});
      auto [y, mask] = native::dropout(x, p, key);
      std::vector<uint8_t> expected(static_cast<size_t>(3 * cols));
      for (int64_t r = 0; r < 3; ++r) {
        native::dropout_mask_row(key, key.first_row + r, cols, static_cast<float>(p), expected.data() + r * cols);
      }
      CHECK(mask.to_vector<uint8_t>() == expected);
      // Kept elements are scaled by 1 / (1 - p), dropped ones are zero.
      std::vector<float> out = y.to_vector<float>();
      const float scale = p < 1 ? static_cast<float>(1.0 / (1.0 - p)) : 0.0f;
      bool scaled = true;
      for (size_t i = 0; i < out.size(); ++i) scaled = scaled && out[i] == (expected[i] ? scale : 0.0f);
      CHECK(scaled);
    }
  }
}

TEST_CASE("the caching allocator reuses freed blocks without counting them as live") {
  ts::release_cached_memory();
  const ts::MemoryStats before = ts::memory_stats();
  CHECK(before.cached_bytes == 0);
  void* first_data = nullptr;
  {
    Tensor big = ts::empty({1 << 20});  // 4 MiB
    first_data = big.data_ptr();
    CHECK(ts::memory_stats().current_bytes == before.current_bytes + (4 << 20));
  }
  // Freed: no longer live, but kept for reuse.
  CHECK(ts::memory_stats().current_bytes == before.current_bytes);
  CHECK(ts::memory_stats().cached_bytes == 4 << 20);
  {
    Tensor again = ts::empty({1 << 20});
    CHECK(again.data_ptr() == first_data);  // the same block, served from the cache
    CHECK(ts::memory_stats().cached_bytes == 0);
  }
  ts::release_cached_memory();
  CHECK(ts::memory_stats().cached_bytes == 0);
  CHECK(ts::memory_stats().current_bytes == before.current_bytes);
}

TEST_CASE("float32 GEMM (AVX-512 tiles) matches float64 for every operand layout and ragged sizes") {
  struct Case {
    int64_t m, n, k;
  };
  // Tile edges (8 rows, 48 columns, 16 lanes, the 256 and 1024 depth blocks), the MNIST
  // linear layers, and shapes thin enough to take the Eigen path; the last two have an A
  // block past 1 MiB, so a transposed B goes through the outer products (packed as a
  // transpose), and 1100 rows span two of their 1024-row blocks.
  const Case cases[] = {{64, 9216, 128}, {128, 9216, 64}, {64, 128, 9216}, {13, 50, 7},   {9, 100, 300},
                        {1, 64, 1030},   {70, 33, 65},    {3, 10, 128},    {17, 97, 1500}, {1100, 50, 300},
                        {260, 70, 1030}};
  uint64_t seed = 100;
  for (const Case& c : cases) {
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        CAPTURE(c.m);
        CAPTURE(c.n);
        CAPTURE(c.k);
        CAPTURE(trans_a);
        CAPTURE(trans_b);
        // A transposed operand is the transpose view of a contiguous tensor, as linear's backward makes.
        Tensor a = trans_a ? uniform({c.k, c.m}, seed++).t() : uniform({c.m, c.k}, seed++);
        Tensor b = trans_b ? uniform({c.n, c.k}, seed++).t() : uniform({c.k, c.n}, seed++);
        Tensor product = native::matmul(a, b);
        CHECK(worst_error(product, native::matmul(a.to(DType::f64), b.to(DType::f64)), c.k) <= 1.0);
      }
    }
  }
  // linear: x W^T + bias, the bias added once.
  Tensor x = uniform({64, 300}, 1), w = uniform({40, 300}, 2), bias = uniform({40}, 3);
  CHECK(worst_error(native::linear(x, w, bias),
                    native::linear(x.to(DType::f64), w.to(DType::f64), bias.to(DType::f64)), 301) <= 1.0);
}
