// One table of op cases (as ggml's test-backend-ops): each runs on the CPU and on the
// device with the same random inputs, forward and backward through autograd, and the
// device's outputs and input gradients must match the CPU's by normalised error within
// the tolerance of the dtype (gpu_test.cpp says why each). bfloat16 cases compare with
// float32 on the CPU, fed the same bfloat16-rounded inputs.
//
// The table reaches every native kernel and every backward node the library records;
// the last test checks the nodes, so a new differentiable op cannot skip its row.
#include <doctest/doctest.h>

#include "support/backward_nodes.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <regex>
#include <set>
#include <tessera/tensor/native.h>

#include "gpu_test.h"

namespace ts = tessera;
namespace native = tessera::native;
using ts::DType;
using ts::Shape;
using ts::Tensor;
using TensorList = std::vector<Tensor>;

namespace {

constexpr DType f32 = DType::f32, f64 = DType::f64, bf16 = DType::bf16, i64 = DType::i64, u8 = DType::u8,
                boolean = DType::boolean;

// A CPU leaf of `dtype` with values uniform in [low, high) (integers in [low, high) for
// integer dtypes). Floating leaves require grad. `transposed` makes it non-contiguous.
Tensor uniform(const Shape& shape, uint64_t seed, DType dtype, double low = -1, double high = 1,
               bool transposed = false) {
  ts::Generator gen(seed);
  Shape drawn = shape;
  if (transposed) std::swap(drawn[drawn.size() - 1], drawn[drawn.size() - 2]);
  Tensor t;
  if (ts::is_floating(dtype)) {
    t = (ts::rand(drawn, gen, {.dtype = DType::f64}) * (high - low) + low).to(dtype);
  } else {
    t = ts::randint(static_cast<int64_t>(low), static_cast<int64_t>(high), drawn, gen).to(dtype);
  }
  if (transposed) t = t.transpose(-1, -2);
  t = t.detach();
  if (ts::is_floating(dtype)) t.requires_grad_();
  return t;
}

// Values with |x| >= 0.1 (for relu, abs, sign: no ties at the kink).
Tensor away_from_zero(const Shape& shape, uint64_t seed, DType dtype, bool transposed = false) {
  Tensor magnitude = uniform(shape, seed, dtype, 0.1, 1.0, transposed).detach();
  Tensor sign = uniform(shape, seed + 1000, dtype, -1, 1, transposed).detach();
  return ts::where(sign > ts::zeros({}, {.dtype = dtype}), magnitude, -magnitude).detach().requires_grad_();
}

// Small integers stored as `dtype`, not requiring grad: equal values occur often.
Tensor small_integers(const Shape& shape, uint64_t seed, DType dtype, int64_t low = -3, int64_t high = 4) {
  ts::Generator gen(seed);
  return ts::randint(low, high, shape, gen).to(dtype).detach();
}

Tensor labels(const std::vector<int64_t>& values, const Shape& shape = {-1}) { return ts::tensor<int64_t>(values, shape); }

// A bool mask of `shape` that is true at every `period`-th element (row-major).
Tensor every_nth(const Shape& shape, int64_t period) {
  std::vector<bool> values(static_cast<size_t>(ts::shape_numel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = i % static_cast<size_t>(period) == 0;
  return ts::tensor<bool>(values, shape);
}

Tensor constant(const std::vector<double>& values, const Shape& shape, DType dtype) {
  return ts::tensor<double>(values, shape).to(dtype).detach();
}

// Rows with ties and NaNs at known places, for max/argmax/max_pool2d's choice rules:
// row 0 has its maximum twice, row 1 two NaNs, row 2 is all equal.
Tensor ties_and_nans(int64_t width, DType dtype) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> values(static_cast<size_t>(3 * width), 0.0);
  for (int64_t i = 0; i < width; ++i) values[i] = static_cast<double>(i % 7) - 3.0;
  values[width / 3] = 9.0;
  values[2 * width / 3] = 9.0;
  for (int64_t i = 0; i < width; ++i) values[width + i] = static_cast<double>(i % 5);
  values[width + width / 2] = nan;
  values[width + width - 1] = nan;
  for (int64_t i = 0; i < width; ++i) values[2 * width + i] = -2.0;
  return constant(values, {3, width}, dtype);
}

using Inputs = std::function<TensorList(DType)>;
using Op = std::function<TensorList(const TensorList&)>;

struct OpCase {
  std::string name;
  std::vector<DType> dtypes;
  Inputs inputs;  // CPU tensors in the given dtype (float32 for bfloat16 cases)
  Op f;           // outputs; the first one is differentiated when it requires grad
  // Multiplies the dtype's tolerance. Convolutions get kWinograd: cuDNN may pick
  // Winograd or FFT algorithms, whose rounding error is several times a direct sum's.
  double tolerance_scale = 1.0;
};

constexpr double kWinograd = 5.0;

TensorList one(const Tensor& t) { return {t}; }

std::vector<OpCase> op_cases() {
  using L = const TensorList&;
  const std::vector<DType> floats = {f32, f64};
  std::vector<OpCase> cases = {
      // ---- Element-wise, broadcasting, strided operands ----
      {"add broadcast", floats, [](DType d) { return TensorList{uniform({2, 3}, 1, d), uniform({3}, 2, d)}; },
       [](L x) { return one(x[0] + x[1]); }},
      {"sub broadcast column, transposed", floats,
       [](DType d) { return TensorList{uniform({3, 1}, 3, d), uniform({3, 4}, 4, d, -1, 1, true)}; },
       [](L x) { return one(x[0] - x[1]); }},
      {"mul non-contiguous", floats,
       [](DType d) { return TensorList{uniform({3, 4}, 5, d, -1, 1, true), uniform({4}, 6, d)}; },
       [](L x) { return one(x[0] * x[1]); }},
      {"div", floats, [](DType d) { return TensorList{uniform({2, 3}, 7, d), uniform({2, 1}, 8, d, 0.5, 2)}; },
       [](L x) { return one(x[0] / x[1]); }},
      {"pow tensor", floats, [](DType d) { return TensorList{uniform({4}, 9, d, 0.5, 2), uniform({4}, 10, d)}; },
       [](L x) { return one(ts::pow(x[0], x[1])); }},
      {"pow scalar", floats, [](DType d) { return TensorList{uniform({2, 3}, 11, d, 0.5, 2, true)}; },
       [](L x) { return one(x[0].pow(2.5)); }},
      {"maximum", floats, [](DType d) { return TensorList{uniform({3, 3}, 12, d), uniform({3}, 13, d)}; },
       [](L x) { return one(ts::maximum(x[0], x[1])); }},
      {"minimum", floats, [](DType d) { return TensorList{uniform({3, 3}, 14, d), uniform({3, 1}, 15, d)}; },
       [](L x) { return one(ts::minimum(x[0], x[1])); }},
      {"neg", floats, [](DType d) { return TensorList{uniform({5}, 16, d)}; }, [](L x) { return one(-x[0]); }},
      {"abs", floats, [](DType d) { return TensorList{away_from_zero({2, 4}, 17, d, true)}; },
       [](L x) { return one(x[0].abs()); }},
      {"exp", floats, [](DType d) { return TensorList{uniform({2, 3}, 18, d)}; }, [](L x) { return one(x[0].exp()); }},
      {"log", floats, [](DType d) { return TensorList{uniform({2, 3}, 19, d, 0.5, 3)}; },
       [](L x) { return one(x[0].log()); }},
      {"sqrt", floats, [](DType d) { return TensorList{uniform({2, 3}, 20, d, 0.5, 3, true)}; },
       [](L x) { return one(x[0].sqrt()); }},
      {"relu", floats, [](DType d) { return TensorList{away_from_zero({3, 4}, 21, d)}; },
       [](L x) { return one(ts::relu(x[0])); }},
      {"relu: NaN and signed zeros (PyTorch keeps both, and passes NaN's gradient)", floats,
       [](DType d) {
         const double nan = std::numeric_limits<double>::quiet_NaN();
         return TensorList{constant({nan, -0.0, 0.0, -2.0, 3.0, nan}, {6}, d).requires_grad_()};
       },
       [](L x) { return one(ts::relu(x[0])); }},
      {"sigmoid", floats, [](DType d) { return TensorList{uniform({6}, 22, d, -3, 3)}; },
       [](L x) { return one(ts::sigmoid(x[0])); }},
      {"tanh", floats, [](DType d) { return TensorList{uniform({6}, 23, d, -2, 2)}; },
       [](L x) { return one(ts::tanh(x[0])); }},
      {"sin cos", floats, [](DType d) { return TensorList{uniform({9}, 27, d, -4, 4)}; },
       [](L x) { return TensorList{ts::sin(x[0]), ts::cos(x[0])}; }},
      {"clamp silu logsumexp var", floats, [](DType d) { return TensorList{uniform({4, 6}, 28, d, -2, 2)}; },
       [](L x) {
         return TensorList{ts::clamp(x[0], -0.5, 0.5), ts::silu(x[0]), ts::logsumexp(x[0], {1}), ts::var(x[0], {0})};
       }},
      {"conv1d avg_pool2d group_norm", floats, [](DType d) { return TensorList{uniform({2, 4, 6, 6}, 29, d)}; },
       [](L x) {
         return TensorList{ts::avg_pool2d(x[0], 3, 2, 1), ts::group_norm(x[0], 2),
                           ts::conv1d(x[0].flatten(2), x[0].narrow(0, 0, 1).reshape({3, 4, 12}).narrow(2, 0, 3))};
       }},
      {"sign and reciprocal (native)", floats, [](DType d) { return TensorList{away_from_zero({7}, 24, d)}; },
       [](L x) {
         return TensorList{native::unary(native::UnaryOp::sign, x[0].detach()),
                           native::unary(native::UnaryOp::reciprocal, x[0].detach())};
       }},
      {"where", floats, [](DType d) { return TensorList{uniform({2, 3}, 25, d), uniform({3}, 26, d)}; },
       [](L x) { return one(ts::where(ts::tensor<bool>({true, false, true, false, false, true}, {2, 3}).to(x[0].device()), x[0], x[1])); }},
      {"scalar forms", floats, [](DType d) { return TensorList{uniform({4}, 27, d, 0.5, 2)}; },
       [](L x) { return one((x[0] + 1.5) * 2.0 - 0.5 + (3.0 / x[0]) + x[0] / 4.0 + (1.0 - x[0])); }},
      {"comparisons", floats,
       [](DType d) { return TensorList{small_integers({4, 5}, 28, d), small_integers({5}, 29, d)}; },
       [](L x) {
         return TensorList{ts::eq(x[0], x[1]), ts::ne(x[0], x[1]), ts::lt(x[0], x[1]),
                           ts::le(x[0], x[1]), ts::gt(x[0], x[1]), ts::ge(x[0], x[1])};
       }},
      {"in-place updates", floats, [](DType d) { return TensorList{uniform({3, 4}, 30, d), uniform({4}, 31, d, 0.5, 2)}; },
       [](L x) {
         ts::NoGradGuard no_grad;
         Tensor t = x[0].detach().clone();
         t.add_(x[1]).mul_(2.0).sub_(x[1], 0.5).div_(x[1]).add_(0.25).div_(3.0).mul_(x[1]);
         Tensor filled = x[0].detach().clone().fill_(1.5);
         Tensor zeroed = x[0].detach().clone().zero_();
         Tensor copied = ts::zeros({2, 3, 4}, {.dtype = x[0].dtype(), .device = x[0].device()});
         copied.copy_(x[1]);  // broadcast
         return TensorList{t, filled, zeroed, copied};
       }},
      {"large, vectorised with a tail", floats,
       [](DType d) { return TensorList{uniform({1000003}, 32, d), uniform({1000003}, 33, d)}; },
       [](L x) { return one(ts::sigmoid(x[0] * x[1] + x[0])); }},
      {"misaligned views", floats, [](DType d) { return TensorList{uniform({4099}, 34, d), uniform({4099}, 35, d)}; },
       [](L x) { return one(x[0].narrow(0, 1, 4097) * x[1].narrow(0, 2, 4097) - x[0].narrow(0, 0, 4097)); }},
      {"integer arithmetic", {i64, u8},
       [](DType d) {
         return TensorList{small_integers({3, 4}, 36, d, 0, 10), small_integers({4}, 37, d, 0, 10)};
       },
       [](L x) {
         return TensorList{x[0] + x[1], x[0] - x[1], x[0] * x[1], ts::maximum(x[0], x[1]), ts::minimum(x[0], x[1]),
                           -x[0], x[0].abs(), native::unary(native::UnaryOp::sign, x[0]), ts::eq(x[0], x[1]),
                           ts::lt(x[0], x[1]), x[0].sum(), x[0].sum({0}), ts::where(ts::gt(x[0], x[1]), x[0], x[1]),
                           std::get<0>(x[0].max(1)), std::get<1>(x[0].max(1)), x[0].to(DType::f32)};
       }},
      {"bool masks: logical ops, where, sum, conversions", {boolean},
       [](DType d) {
         return TensorList{small_integers({4, 5}, 130, d, 0, 2), small_integers({5}, 131, d, 0, 2),
                           uniform({4, 5}, 132, f32).detach()};
       },
       [](L x) {
         const Tensor& p = x[0];
         const Tensor& q = x[1];
         return TensorList{~p, p & q, p | q, p ^ q, p == q, p != q, ts::where(p, x[2], -x[2]), ts::where(p, q, ~q),
                           p.sum(), p.sum({0}), p.t().contiguous(), p.to(f32), p.to(i64), x[2].to(boolean),
                           ts::logical_not(x[2] > 0.0), ts::logical_and(x[2], x[2] * 0.0)};
       }},
      {"integer in-place", {i64},
       [](DType d) { return TensorList{small_integers({5, 3}, 38, d, 0, 9), small_integers({3}, 39, d, 1, 9)}; },
       [](L x) {
         Tensor t = x[0].clone();
         t.add_(x[1], 2.0).mul_(x[1]).sub_(x[1]).add_(3.0);
         return one(t);
       }},
      // ---- Reductions ----
      {"sum all", floats, [](DType d) { return TensorList{uniform({2, 3}, 40, d, -1, 1, true)}; },
       [](L x) { return one(x[0].sum()); }},
      {"sum dims keepdim", floats, [](DType d) { return TensorList{uniform({2, 3, 4}, 41, d)}; },
       [](L x) { return one(x[0].sum({0, 2}, true)); }},
      {"sum long rows (split across blocks)", floats, [](DType d) { return TensorList{uniform({2, 100000}, 42, d)}; },
       [](L x) { return one(x[0].sum({1})); }},
      {"sum short rows (a thread per row)", floats, [](DType d) { return TensorList{uniform({5000, 3}, 43, d)}; },
       [](L x) { return one(x[0].sum({1})); }},
      {"sum leading dim", floats, [](DType d) { return TensorList{uniform({64, 50}, 44, d)}; },
       [](L x) { return one(x[0].sum({0})); }},
      // Sums that read the input in place: columns (one part, and long columns in parts),
      // two leading dims, and around a middle dim (a convolution's bias gradient).
      {"sum leading dims in place", floats,
       [](DType d) { return TensorList{uniform({8, 30}, 160, d), uniform({20000, 3}, 161, d), uniform({4, 6, 10}, 162, d)}; },
       [](L x) { return TensorList{x[0].sum({0}), x[1].sum({0}), x[2].sum({0, 1})}; }},
      {"sum around a middle dim in place", floats,
       [](DType d) { return TensorList{uniform({2, 3, 5, 7}, 163, d), uniform({3, 2, 40000}, 164, d)}; },
       [](L x) { return TensorList{x[0].sum({0, 2, 3}), x[1].sum({0, 2})}; }},
      {"mean dim", floats, [](DType d) { return TensorList{uniform({3, 4}, 45, d, -1, 1, true)}; },
       [](L x) { return one(x[0].mean({1})); }},
      {"amax", floats, [](DType d) { return TensorList{uniform({3, 5}, 46, d)}; },
       [](L x) { return one(x[0].amax({1})); }},
      {"max dim", floats, [](DType d) { return TensorList{uniform({4, 3}, 47, d, -1, 1, true)}; },
       [](L x) {
         auto [values, indices] = x[0].max(0);
         return TensorList{values, indices, x[0].argmax(1), x[0].argmax()};
       }},
      {"max: ties and NaNs, short, block and split rows", floats,
       [](DType d) { return TensorList{ties_and_nans(5, d), ties_and_nans(300, d), ties_and_nans(70000, d)}; },
       [](L x) {
         TensorList out;
         for (const Tensor& t : x) {
           auto [values, indices] = t.max(1);
           out.insert(out.end(), {values, indices, t.amax({1})});
         }
         return out;
       }},
      {"empty tensors", floats, [](DType d) { return TensorList{uniform({0, 3}, 48, d)}; },
       [](L x) { return TensorList{(x[0] + 1.0).sum({0}), x[0].sum({1}), x[0] * 2.0}; }},
      // ---- Linear algebra ----
      {"matmul 2-D", floats, [](DType d) { return TensorList{uniform({3, 4}, 50, d), uniform({4, 2}, 51, d, -1, 1, true)}; },
       [](L x) { return one(ts::matmul(x[0], x[1])); }},
      {"matmul batched broadcast", floats,
       [](DType d) { return TensorList{uniform({2, 3, 4}, 52, d), uniform({4, 5}, 53, d)}; },
       [](L x) { return one(ts::matmul(x[0], x[1])); }},
      {"matmul broadcast batch dims (copied)", floats,
       [](DType d) { return TensorList{uniform({2, 1, 3, 4}, 54, d), uniform({1, 5, 4, 2}, 55, d)}; },
       [](L x) { return one(ts::matmul(x[0], x[1])); }},
      {"matmul vectors", floats,
       [](DType d) { return TensorList{uniform({4}, 56, d), uniform({4, 3}, 57, d), uniform({3}, 58, d)}; },
       [](L x) { return one(ts::matmul(ts::matmul(x[0], x[1]), x[2])); }},
      {"matmul transposed operands, larger", floats,
       [](DType d) { return TensorList{uniform({300, 64}, 59, d), uniform({70, 300}, 60, d)}; },
       [](L x) { return one(ts::matmul(x[0].t(), x[1].t())); }},
      {"linear", floats,
       [](DType d) { return TensorList{uniform({2, 3, 4}, 61, d), uniform({5, 4}, 62, d), uniform({5}, 63, d)}; },
       [](L x) { return one(ts::linear(x[0], x[1], x[2])); }},
      {"linear no bias, transposed weight", floats,
       [](DType d) { return TensorList{uniform({3, 4}, 64, d), uniform({5, 4}, 65, d, -1, 1, true)}; },
       [](L x) { return one(ts::linear(x[0], x[1])); }},
      {"linear, a bias that is a view at an odd offset (no cuBLASLt epilogue)", floats,
       [](DType d) { return TensorList{uniform({6, 8}, 165, d), uniform({7, 8}, 166, d), uniform({8}, 167, d)}; },
       [](L x) { return one(ts::linear(x[0], x[1], x[2].narrow(0, 1, 7))); }},
      {"linear, MNIST-sized", floats,
       [](DType d) { return TensorList{uniform({16, 1152}, 66, d), uniform({128, 1152}, 67, d, -0.03, 0.03), uniform({128}, 68, d)}; },
       [](L x) { return one(ts::linear(x[0], x[1], x[2])); }},
      // ---- Convolution and pooling ----
      {"conv2d", floats,
       [](DType d) { return TensorList{uniform({2, 3, 6, 5}, 70, d), uniform({4, 3, 3, 3}, 71, d), uniform({4}, 72, d)}; },
       [](L x) { return one(ts::conv2d(x[0], x[1], x[2])); },
       kWinograd},
      {"conv2d stride padding dilation", floats,
       [](DType d) { return TensorList{uniform({1, 2, 7, 7}, 73, d), uniform({3, 2, 3, 2}, 74, d)}; },
       [](L x) { return one(ts::conv2d(x[0], x[1], {}, {.stride = {2, 1}, .padding = {1, 2}, .dilation = {2, 1}})); },
       kWinograd},
      {"conv2d, MNIST-sized", floats,
       [](DType d) { return TensorList{uniform({8, 32, 26, 26}, 75, d), uniform({64, 32, 3, 3}, 76, d, -0.06, 0.06), uniform({64}, 77, d)}; },
       [](L x) { return one(ts::conv2d(x[0], x[1], x[2])); },
       kWinograd},
      {"max_pool2d", floats, [](DType d) { return TensorList{uniform({2, 2, 6, 6}, 78, d)}; },
       [](L x) { return one(ts::max_pool2d(x[0], 2)); }},
      {"max_pool2d stride padding", floats, [](DType d) { return TensorList{uniform({1, 2, 7, 5}, 79, d)}; },
       [](L x) { return one(ts::max_pool2d(x[0], 3, ts::Size2(2), 1)); }},
      {"max_pool2d overlapping windows", floats, [](DType d) { return TensorList{uniform({2, 3, 9, 8}, 80, d)}; },
       [](L x) { return one(ts::max_pool2d(x[0], 3, ts::Size2(1))); }},
      {"max_pool2d ties and NaNs (indices)", floats,
       [](DType d) { return TensorList{ties_and_nans(16, d).view({1, 3, 4, 4})}; },
       [](L x) {
         auto [out, indices] = native::max_pool2d(x[0], {.kernel = 2, .stride = 2, .padding = 0});
         auto [out_padded, indices_padded] = native::max_pool2d(x[0], {.kernel = 3, .stride = 1, .padding = 1});
         return TensorList{out, indices, out_padded, indices_padded};
       }},
      {"adaptive_avg_pool2d to 1x1", floats, [](DType d) { return TensorList{uniform({2, 3, 4, 5}, 84, d)}; },
       [](L x) { return one(ts::adaptive_avg_pool2d(x[0], 1)); }},
      {"adaptive_avg_pool2d overlapping bins", floats, [](DType d) { return TensorList{uniform({1, 2, 5, 7}, 85, d)}; },
       [](L x) { return one(ts::adaptive_avg_pool2d(x[0], {3, 4})); }},
      // ---- Batch normalisation (running statistics made on the inputs' device) ----
      {"batch_norm train, running statistics updated", floats,
       [](DType d) { return TensorList{uniform({4, 3, 5, 5}, 86, d), uniform({3}, 87, d, 0.5, 1.5), uniform({3}, 88, d)}; },
       [](L x) {
         Tensor mean = ts::zeros_like(x[1]), var = ts::ones_like(x[1]);
         Tensor y = ts::batch_norm(x[0], mean, var, x[1], x[2], true, 0.1, 1e-5);
         return TensorList{y, mean, var};
       }},
      {"batch_norm eval", floats,
       [](DType d) { return TensorList{uniform({2, 3, 4, 4}, 89, d), uniform({3}, 90, d, 0.5, 1.5), uniform({3}, 91, d)}; },
       [](L x) {
         Tensor mean = ts::full_like(x[1], 0.25), var = ts::full_like(x[1], 2.0);
         return one(ts::batch_norm(x[0], mean, var, x[1], x[2], false, 0.1, 1e-5));
       }},
      // ---- Softmax family and losses ----
      {"softmax", floats, [](DType d) { return TensorList{uniform({3, 5}, 81, d, -2, 2, true)}; },
       [](L x) { return one(ts::softmax(x[0], 1)); }},
      {"log_softmax dim 0", floats, [](DType d) { return TensorList{uniform({4, 3}, 82, d, -2, 2)}; },
       [](L x) { return one(ts::log_softmax(x[0], 0)); }},
      {"softmax middle dim", floats, [](DType d) { return TensorList{uniform({2, 5, 3}, 83, d, -2, 2)}; },
       [](L x) { return one(ts::softmax(x[0], 1)); }},
      {"log_softmax long rows", floats, [](DType d) { return TensorList{uniform({8, 1000}, 84, d, -5, 5)}; },
       [](L x) { return one(ts::log_softmax(x[0], -1)); }},
      {"nll_loss mean", floats, [](DType d) { return TensorList{uniform({4, 3}, 85, d)}; },
       [](L x) { return one(ts::nll_loss(x[0], labels({0, 2, 1, 2}).to(x[0].device()))); }},
      {"nll_loss weighted, ignore_index", floats, [](DType d) { return TensorList{uniform({4, 3}, 86, d)}; },
       [](L x) {
         Tensor weight = constant({0.2, 1.0, 3.0}, {3}, x[0].dtype()).to(x[0].device());
         return one(ts::nll_loss(x[0], labels({0, 2, -100, 1}).to(x[0].device()), {.weight = weight}));
       }},
      {"nll_loss none", floats, [](DType d) { return TensorList{uniform({3, 4}, 87, d)}; },
       [](L x) {
         return one(ts::nll_loss(x[0], labels({3, 0, 1}).to(x[0].device()), {.weight = {}, .reduction = ts::Reduction::none}));
       }},
      {"nll_loss sum", floats, [](DType d) { return TensorList{uniform({3, 4}, 88, d)}; },
       [](L x) {
         return one(ts::nll_loss(x[0], labels({3, 0, 1}).to(x[0].device()), {.weight = {}, .reduction = ts::Reduction::sum}));
       }},
      {"cross_entropy, a batch of 64", floats, [](DType d) { return TensorList{uniform({64, 10}, 89, d, -3, 3)}; },
       [](L x) {
         std::vector<int64_t> targets(64);
         for (int64_t i = 0; i < 64; ++i) targets[i] = (i * 7) % 10;
         return one(ts::cross_entropy(x[0], labels(targets).to(x[0].device())));
       }},
      {"dropout", floats, [](DType d) { return TensorList{uniform({4, 6}, 90, d)}; },
       [](L x) { return one(ts::dropout(x[0], 0.3, true, {.seed = 1, .stream = 2, .step = 3})); }},
      {"dropout masks, many rows, offset rows", floats, [](DType d) { return TensorList{uniform({64, 1001}, 91, d)}; },
       [](L x) {
         auto [out, mask] = native::dropout(x[0].detach(), 0.5, {.seed = 7, .stream = 8, .step = (1ull << 33) + 5, .first_row = 1000});
         auto [none_dropped, keep_all] = native::dropout(x[0].detach(), 0.0, {.seed = 7});
         auto [all_dropped, keep_none] = native::dropout(x[0].detach(), 1.0, {.seed = 7});
         return TensorList{out, mask, none_dropped, keep_all, all_dropped, keep_none};
       }},
      // ---- Transformer layers: layer norm, GELU, erf, embedding ----
      {"layer_norm", floats,
       [](DType d) { return TensorList{uniform({4, 7, 33}, 120, d, -2, 2), uniform({33}, 121, d, 0.5, 1.5), uniform({33}, 122, d)}; },
       [](L x) { return one(ts::layer_norm(x[0], {33}, x[1], x[2])); }},
      {"layer_norm GPT-2 width, 200 rows (chunked weight gradient)", floats,
       [](DType d) { return TensorList{uniform({200, 768}, 123, d, -1, 3), uniform({768}, 124, d, 0.5, 1.5), uniform({768}, 125, d)}; },
       [](L x) { return one(ts::layer_norm(x[0], {768}, x[1], x[2])); }},
      {"layer_norm two dims, no affine, transposed; weight only", floats,
       [](DType d) { return TensorList{uniform({3, 4, 6}, 126, d, -1, 1, true), uniform({6}, 127, d, 0.5, 1.5)}; },
       [](L x) { return one(ts::layer_norm(x[0], {4, 6}) + ts::layer_norm(x[0], {6}, x[1])); }},
      {"layer_norm saved statistics (native)", floats, [](DType d) { return TensorList{uniform({5, 300}, 128, d, -4, 6)}; },
       [](L x) {
         auto [out, mean, rstd] = native::layer_norm(x[0].detach(), {300}, {}, {}, 1e-5);
         return TensorList{out, mean, rstd};
       }},
      {"gelu, gelu tanh, erf", floats, [](DType d) { return TensorList{uniform({3, 1001}, 129, d, -6, 6)}; },
       [](L x) { return TensorList{ts::gelu(x[0]) + ts::gelu(x[0], "tanh") * 0.5 + x[0].erf(), ts::gelu(x[0], "tanh")}; }},
      {"gelu transposed", floats, [](DType d) { return TensorList{uniform({5, 8}, 130, d, -3, 3, true)}; },
       [](L x) { return one(ts::gelu(x[0])); }},
      {"embedding, repeated indices", floats,
       [](DType d) { return TensorList{uniform({10, 6}, 131, d), uniform({3, 5}, 132, i64, 0, 10)}; },
       [](L x) { return one(ts::embedding(x[1], x[0])); }},
      {"embedding, many repeats (sorted segments)", floats,
       [](DType d) { return TensorList{uniform({1000, 64}, 133, d), uniform({8, 128}, 134, i64, 0, 50)}; },
       [](L x) { return one(ts::embedding(x[1], x[0])); }},
      {"embedding padding_idx, scale_grad_by_freq", floats,
       [](DType d) { return TensorList{uniform({7, 9}, 135, d), uniform({40}, 136, i64, 0, 7)}; },
       [](L x) { return one(ts::embedding(x[1], x[0], {.padding_idx = 3, .scale_grad_by_freq = true})); }},
      {"embedding max_norm (rows renormalised in place)", floats,
       [](DType d) { return TensorList{uniform({12, 5}, 137, d, -2, 2), uniform({2, 9}, 138, i64, 0, 12)}; },
       [](L x) {
         Tensor out = ts::embedding(x[1], x[0], {.max_norm = 1.0});
         Tensor out_p1 = ts::embedding(x[1], x[0].detach(), {.max_norm = 0.5, .norm_type = 1.0});
         return TensorList{out, out_p1, x[0].detach().clone()};
       }},
      // ---- Views, copies, conversions, devices, joins ----
      {"view reshape flatten", floats, [](DType d) { return TensorList{uniform({2, 3, 4}, 92, d)}; },
       [](L x) { return one(x[0].view({6, 4}).reshape({4, 6}).flatten() * ts::arange(24, {.dtype = x[0].dtype(), .device = x[0].device()})); }},
      {"reshape of non-contiguous", floats, [](DType d) { return TensorList{uniform({3, 4}, 93, d, -1, 1, true)}; },
       [](L x) { return one(x[0].reshape({12}) * 3.0); }},
      {"narrow select", floats, [](DType d) { return TensorList{uniform({4, 5}, 94, d)}; },
       [](L x) { return one(x[0].narrow(1, 1, 3).select(0, 2) * 3.0 + x[0].select(1, -1).sum()); }},
      {"transpose permute t", floats, [](DType d) { return TensorList{uniform({2, 3, 4}, 95, d)}; },
       [](L x) { return one(x[0].permute({2, 0, 1}).transpose(0, 2).select(2, 1).t() * 2.0); }},
      {"squeeze unsqueeze expand", floats, [](DType d) { return TensorList{uniform({3, 1}, 96, d)}; },
       [](L x) { return one(x[0].squeeze(1).unsqueeze(0).expand({2, 3}) * x[0].expand({2, 3, 4}).sum({2}).squeeze()); }},
      {"contiguous clone", floats, [](DType d) { return TensorList{uniform({3, 4}, 97, d, -1, 1, true)}; },
       [](L x) { return one(x[0].contiguous().clone() * 2.0); }},
      // Through pinned host memory and back: direct DMA both ways on a GPU.
      {"pin_memory round trip", floats, [](DType d) { return TensorList{uniform({3, 4}, 198, d)}; },
       [](L x) { return one(x[0].cpu().pin_memory().to(x[0].device()) * 2.0); }},
      {"to dtype", floats, [](DType d) { return TensorList{uniform({3, 7}, 98, d)}; },
       [](L x) {
         Tensor other = x[0].to(x[0].dtype() == DType::f32 ? DType::f64 : DType::f32);
         return TensorList{other.to(x[0].dtype()) * 2.0 + x[0], x[0].detach().to(DType::bf16), x[0].detach().to(DType::i64)};
       }},
      {"to another device and back", floats, [](DType d) { return TensorList{uniform({3, 4}, 99, d)}; },
       [](L x) { return one((x[0].to(ts::Device::cpu()) * 3.0).to(x[0].device())); }},
      {"cat stack", floats, [](DType d) { return TensorList{uniform({2, 3}, 100, d), uniform({1, 3}, 101, d)}; },
       [](L x) { return one(ts::stack({ts::cat({x[0], x[1]}, 0), ts::cat({x[1], x[0]}, 0)}, 1) * 2.0); }},
      // ---- Masks, indexing, selection and scans (index tensors made on the inputs' device) ----
      {"masked_fill, broadcast mask", floats, [](DType d) { return TensorList{uniform({4, 5, 6}, 140, d)}; },
       [](L x) {
         Tensor mask = every_nth({5, 6}, 4).to(x[0].device());
         return TensorList{x[0].masked_fill(mask, -1e9), ts::masked_fill(x[0].narrow(2, 0, 1), mask, 0.5)};
       }},
      {"masked_fill and tril on int64 and bool", {i64},
       [](DType d) { return TensorList{small_integers({6, 6}, 141, d)}; },
       [](L x) {
         Tensor mask = x[0] > 0.0;
         return TensorList{x[0].masked_fill(mask, 7), mask.masked_fill(~mask, 1), mask.tril(1), x[0].triu(-1),
                           ts::ones({5, 5}, {.dtype = DType::boolean, .device = x[0].device()}).tril()};
       }},
      {"tril triu, batched, non-contiguous", floats, [](DType d) { return TensorList{uniform({3, 6, 7}, 142, d, -1, 1, true)}; },
       [](L x) { return one(x[0].tril(1) * 2.0 + x[0].triu(-2) + ts::tril(x[0], -9)); }},
      {"split and chunk, unused pieces", floats, [](DType d) { return TensorList{uniform({6, 10}, 143, d)}; },
       [](L x) {
         std::vector<Tensor> p = x[0].split(std::vector<int64_t>{2, 3, 5}, 1);
         std::vector<Tensor> c = x[0].chunk(4, 0);
         return TensorList{p[0] * p[1].sum({1}, true) + c[2].narrow(1, 0, 2).sum(), p[2], c[1]};
       }},
      {"index_select, repeated indices, two dims", floats, [](DType d) { return TensorList{uniform({6, 5, 4}, 144, d)}; },
       [](L x) {
         Tensor rows = labels({5, 0, 5, 2}).to(x[0].device()), cols = labels({4, 4, 1}).to(x[0].device());
         return one(x[0].index_select(0, rows).index_select(1, cols) * 3.0);
       }},
      {"index_select many rows (index_add_ by column)", floats, [](DType d) { return TensorList{uniform({100, 64}, 145, d)}; },
       [](L x) {
         ts::Generator gen(146);
         return one(x[0].index_select(0, ts::randint(0, 100, {5000}, gen).to(x[0].device())));
       }},
      {"gather and scatter_add, repeated indices", floats,
       [](DType d) { return TensorList{uniform({4, 7}, 147, d), uniform({4, 5}, 148, d, -1, 1, true), uniform({3, 9}, 149, d)}; },
       [](L x) {
         ts::Generator gen(150);
         Tensor pick = ts::randint(0, 7, {4, 9}, gen).to(x[0].device());
         Tensor place = ts::randint(0, 4, {3, 5}, gen).to(x[0].device());
         Tensor rows = ts::randint(0, 5, {3, 4}, gen).to(x[0].device());
         return TensorList{x[0].gather(1, pick) * x[2].narrow(0, 0, 1) + x[1].scatter_add(0, place, x[2].narrow(1, 0, 5)).sum(),
                           ts::gather(x[1].t(), 0, rows)};
       }},
      {"native index_add_ and scatter_add_ on int64", {i64},
       [](DType d) { return TensorList{small_integers({5, 4}, 151, d), small_integers({3, 4}, 152, d)}; },
       [](L x) {
         Tensor into = x[0].clone();
         native::index_add_(into, 0, labels({4, 0, 4}).to(x[0].device()), x[1]);
         Tensor scattered = x[0].clone();
         native::scatter_add_(scattered, 1, labels({3, 3, 0, 1, 2, 2, 2, 2, 1, 0, 0, 0}, {3, 4}).to(x[0].device()), x[1]);
         return TensorList{into, scattered};
       }},
      {"topk: largest, smallest, every dim", floats, [](DType d) { return TensorList{uniform({7, 33}, 153, d, -1, 1, true)}; },
       [](L x) {
         auto [values, indices] = x[0].topk(5, 1);
         auto [low, low_indices] = ts::topk(x[0], 3, 0, /*largest=*/false);
         return TensorList{values + low.sum(), indices, low_indices, std::get<0>(x[0].topk(33, 1))};
       }},
      {"topk: ties and NaNs by position, long rows", floats,
       [](DType d) { return TensorList{ties_and_nans(50, d), uniform({2, 50000}, 154, d)}; },
       [](L x) {
         auto [values, indices] = x[0].topk(12, 1);
         auto [low, low_indices] = x[0].topk(7, 1, false);
         auto [long_values, long_indices] = x[1].detach().topk(100, -1);
         return TensorList{values, indices, low, low_indices, long_values, long_indices};
       }},
      {"topk on integers: ties by position", {i64, u8},
       [](DType d) { return TensorList{small_integers({6, 40}, 155, d, 0, 5)}; },
       [](L x) {
         auto [values, indices] = x[0].topk(10, 1);
         auto [low, low_indices] = x[0].topk(4, 0, false);
         return TensorList{values, indices, low, low_indices};
       }},
      {"cumsum, both directions", floats, [](DType d) { return TensorList{uniform({5, 300}, 156, d, -1, 1, true)}; },
       [](L x) {
         return TensorList{x[0].cumsum(1) + ts::cumsum(x[0], 0), native::cumsum(x[0].detach(), 1, /*reverse=*/true)};
       }},
      {"cumsum on integers and bool", {i64, u8},
       [](DType d) { return TensorList{small_integers({4, 50}, 157, d, 0, 9)}; },
       [](L x) { return TensorList{x[0].cumsum(1), x[0].cumsum(0), (x[0] > 4.0).cumsum(1)}; }},
      {"searchsorted (native)", floats,
       [](DType d) { return TensorList{uniform({3, 40}, 158, d, 0.1, 1), uniform({3, 25}, 159, d, 0, 30)}; },
       [](L x) {
         Tensor sorted = x[0].detach().cumsum(1);
         return TensorList{native::searchsorted(sorted, x[1].detach(), false), native::searchsorted(sorted, x[1].detach(), true),
                           native::searchsorted(sorted.select(0, 0), x[1].detach(), true)};
       }},
      {"multinomial: the device draws the CPU's indices", floats,
       [](DType d) { return TensorList{uniform({4, 30}, 160, d, 0, 1)}; },
       [](L x) {
         Tensor probs = x[0].detach().masked_fill(x[0].detach() < 0.2, 0.0);
         ts::Generator with(161), without(161);
         return TensorList{ts::multinomial(probs, 500, /*replacement=*/true, with),
                           ts::multinomial(probs, 10, /*replacement=*/false, without)};
       }},
      {"softmax and log_softmax over every dim, non-contiguous", floats,
       [](DType d) { return TensorList{uniform({3, 4, 5}, 162, d, -3, 3, true)}; },
       [](L x) {
         return TensorList{x[0].softmax(0) + x[0].log_softmax(1) + ts::softmax(x[0], -1) * x[0].log_softmax(-2)};
       }},
      {"nll_loss [N, C, d1, d2], weighted, ignore_index", floats, [](DType d) { return TensorList{uniform({3, 5, 2, 4}, 163, d)}; },
       [](L x) {
         ts::Generator gen(164);
         Tensor target = ts::randint(0, 5, {3, 2, 4}, gen).masked_fill(every_nth({2, 4}, 3), -100);
         Tensor weight = constant({0.2, 1.0, 3.0, 0.5, 1.5}, {5}, x[0].dtype()).to(x[0].device());
         target = target.to(x[0].device());
         return TensorList{ts::nll_loss(x[0], target, {.weight = weight}),
                           ts::nll_loss(x[0].detach(), target, {.reduction = ts::Reduction::none})};
       }},
      {"cross_entropy label smoothing [N, C, d], weights, ignore_index", floats,
       [](DType d) { return TensorList{uniform({4, 6, 3}, 165, d, -2, 2)}; },
       [](L x) {
         Tensor target = labels({0, 5, 1, 1, 2, 3, 4, 1, 0, 5, 5, 2}, {4, 3}).to(x[0].device());
         Tensor weight = constant({0.5, 1.0, 2.0, 1.5, 0.7, 1.1}, {6}, x[0].dtype()).to(x[0].device());
         return TensorList{ts::cross_entropy(x[0], target, {.weight = weight, .ignore_index = 1, .label_smoothing = 0.2}),
                           ts::cross_entropy(x[0].detach(), target, {.reduction = ts::Reduction::none, .label_smoothing = 0.1})};
       }},
      // ---- Attention (the CPU's blocked kernel against CUDA's GEMMs and row kernels) ----
      {"attention, boolean mask with an empty row", floats,
       [](DType d) { return TensorList{uniform({2, 3, 7, 8}, 120, d), uniform({2, 3, 9, 8}, 121, d), uniform({2, 3, 9, 5}, 122, d)}; },
       [](L x) {
         Tensor keep = ts::gt(uniform({7, 9}, 123, f64, -0.5, 1).detach(), ts::zeros({}, {.dtype = f64}));
         keep.narrow(0, 2, 1).zero_();
         return one(ts::scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = keep.to(x[0].device())}));
       }},
      {"attention causal from [B, T, H, D], dropout", floats,
       [](DType d) { return TensorList{uniform({2, 33, 3, 16}, 124, d), uniform({2, 33, 3, 16}, 125, d), uniform({2, 33, 3, 16}, 126, d)}; },
       [](L x) {
         return one(ts::scaled_dot_product_attention(x[0].transpose(1, 2), x[1].transpose(1, 2), x[2].transpose(1, 2),
                                                     {.dropout_p = 0.2, .is_causal = true, .dropout_key = {.seed = 5, .step = 9, .first_row = 3}}));
       }},
      {"attention float mask, several CPU tiles, lse", floats,
       [](DType d) { return TensorList{uniform({1, 2, 130, 32}, 127, d), uniform({1, 2, 300, 32}, 128, d), uniform({1, 2, 300, 24}, 129, d), uniform({2, 1, 130, 300}, 130, d).detach()}; },
       [](L x) {
         auto [out, lse] = native::scaled_dot_product_attention(x[0].detach(), x[1].detach(), x[2].detach(),
                                                                {.attn_mask = x[3].select(0, 0), .scale = 0.3});
         return TensorList{ts::scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = x[3].select(0, 1), .scale = 0.3}), out, lse};
       }},
      // ---- bfloat16 where the CUDA backend has it ----
      {"bfloat16 element-wise", {bf16},
       [](DType d) { return TensorList{uniform({37, 41}, 110, d), uniform({41}, 111, d, 0.5, 2)}; },
       [](L x) {
         return TensorList{ts::relu(x[0] * x[1] + x[0]) + ts::sigmoid(x[0]) * ts::tanh(x[1]) - x[0].exp() / x[1],
                           ts::maximum(x[0], x[1]), ts::lt(x[0], x[1])};
       }},
      {"bfloat16 sum", {bf16}, [](DType d) { return TensorList{uniform({6, 5000}, 112, d)}; },
       [](L x) { return TensorList{x[0].sum({1}), x[0].mean(), x[0].amax({0})}; }},
      {"bfloat16 matmul and linear", {bf16},
       [](DType d) { return TensorList{uniform({2, 24, 40}, 113, d), uniform({40, 16}, 114, d), uniform({16}, 115, d)}; },
       [](L x) { return one(ts::matmul(x[0], x[1]) + ts::linear(x[0], x[1].t(), x[2])); }},
      {"bfloat16 conv2d", {bf16},
       [](DType d) { return TensorList{uniform({2, 4, 10, 10}, 116, d), uniform({8, 4, 3, 3}, 117, d, -0.3, 0.3), uniform({8}, 118, d)}; },
       [](L x) { return one(ts::conv2d(x[0], x[1], x[2], {.stride = 1, .padding = 1})); }},
      // What GPT-2 runs under --mixed-precision bf16, a row each. Every op here rounds its
      // result to bfloat16 once (relative step 2^-8, about 2e-3 on average), from float32
      // arithmetic inside; attention's backward also rounds what feeds its next GEMM (Pd and
      // dS) and the gradients chain three or four such roundings: well under the 2e-2 of
      // gpu_test::tolerance. The reference is float32 on the CPU, on the same rounded inputs.
      {"bfloat16 layer_norm", {bf16},
       [](DType d) { return TensorList{uniform({6, 96}, 139, d, -2, 2), uniform({96}, 140, d, 0.5, 1.5), uniform({96}, 141, d)}; },
       [](L x) { return one(ts::layer_norm(x[0], {96}, x[1], x[2])); }},
      {"bfloat16 gelu, exact and tanh", {bf16}, [](DType d) { return TensorList{uniform({7, 50}, 166, d, -3, 3)}; },
       [](L x) { return one(ts::gelu(x[0], "tanh") + ts::gelu(x[0])); }},
      {"bfloat16 embedding (GPT-2's wte + wpe)", {bf16},
       [](DType d) { return TensorList{uniform({11, 24}, 142, d), uniform({8, 24}, 167, d)}; },
       [](L x) {
         Tensor ids = labels({3, 0, 10, 3, 7, 7, 1, 2, 9, 0, 5, 3}, {2, 6}).to(x[0].device());
         Tensor positions = labels({0, 1, 2, 3, 4, 5}).to(x[0].device());
         return one(ts::embedding(ids, x[0]) + ts::embedding(positions, x[1]));
       }},
      {"bfloat16 softmax and log_softmax", {bf16}, [](DType d) { return TensorList{uniform({5, 4, 33}, 168, d, -4, 4)}; },
       [](L x) { return one(x[0].softmax(-1) + x[0].log_softmax(1) * 0.25); }},
      {"bfloat16 cross_entropy (fused) and nll_loss", {bf16},
       [](DType d) { return TensorList{uniform({12, 50}, 169, d, -3, 3), uniform({6, 7}, 170, d, -3, 3)}; },
       [](L x) {
         ts::Generator gen(171);
         Tensor targets = ts::randint(0, 50, {12}, gen).to(x[0].device());
         Tensor classes = labels({6, 0, 3, 3, 1, 2}).to(x[0].device());
         return TensorList{ts::cross_entropy(x[0], targets) + ts::nll_loss(x[1].log_softmax(1), classes),
                           ts::cross_entropy(x[0].detach(), targets, {.reduction = ts::Reduction::none})};
       }},
      {"bfloat16 attention causal from [B, T, H, D], dropout (GPT-2's)", {bf16},
       [](DType d) { return TensorList{uniform({2, 33, 3, 16}, 124, d), uniform({2, 33, 3, 16}, 125, d), uniform({2, 33, 3, 16}, 126, d)}; },
       [](L x) {
         return one(ts::scaled_dot_product_attention(x[0].transpose(1, 2), x[1].transpose(1, 2), x[2].transpose(1, 2),
                                                     {.dropout_p = 0.2, .is_causal = true, .dropout_key = {.seed = 5, .step = 9, .first_row = 3}}));
       }},
      {"bfloat16 attention, boolean mask (the KV cache's) and float mask", {bf16},
       [](DType d) { return TensorList{uniform({2, 2, 7, 8}, 172, d), uniform({2, 2, 9, 8}, 173, d), uniform({2, 2, 9, 5}, 174, d), uniform({7, 9}, 175, d).detach()}; },
       [](L x) {
         Tensor keep = ts::gt(uniform({7, 9}, 176, f64, -0.5, 1).detach(), ts::zeros({}, {.dtype = f64}));
         keep.narrow(0, 2, 1).zero_();  // a row with no key: output 0
         return TensorList{ts::scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = keep.to(x[0].device())}) +
                               ts::scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = x[3], .scale = 0.3})};
       }},
      {"bfloat16 dropout and pooling (forward)", {bf16}, [](DType d) { return TensorList{uniform({2, 3, 8, 8}, 119, d)}; },
       [](L x) {
         auto [pooled, indices] = native::max_pool2d(x[0].detach(), {});
         auto [dropped, mask] = native::dropout(x[0].detach(), 0.25, {.seed = 3});
         return TensorList{pooled, indices, dropped, mask};
       }},
  };
  return cases;
}

// The case's inputs for the CPU reference and for the device. bfloat16 inputs are
// rounded once; the reference gets them back as float32.
struct CaseInputs {
  TensorList reference, device;
};

CaseInputs prepare(const OpCase& c, DType dtype) {
  CaseInputs prepared;
  for (const Tensor& made : c.inputs(dtype == bf16 ? f32 : dtype)) {
    const bool grad = made.requires_grad();
    Tensor base = made.detach();
    if (dtype == bf16 && base.dtype() == f32) base = base.to(bf16);
    Tensor reference = base.dtype() == bf16 ? base.to(f32) : base.clone();
    prepared.reference.push_back(reference.detach().requires_grad_(grad));
    prepared.device.push_back(base.to(gpu_test::target()).detach().requires_grad_(grad));
  }
  return prepared;
}

// Checks `actual` (on the device) against `expected` (the CPU's); returns the normalised
// error (infinite when they cannot be compared). CHECKs only, never REQUIREs: one GPU run
// must report every case, not stop at the first bad one.
double check_close(const Tensor& actual, const Tensor& expected, DType dtype, double tolerance_scale,
                   const std::string& what) {
  CAPTURE(what);
  constexpr double kInfinite = std::numeric_limits<double>::infinity();
  if (actual.defined() != expected.defined()) {
    FAIL_CHECK("defined on one side only (device: " << actual.defined() << ", CPU: " << expected.defined() << ")");
    return kInfinite;
  }
  if (!actual.defined()) return 0.0;
  CHECK(actual.device() == gpu_test::target());
  const bool floating = ts::is_floating(expected.dtype());
  CHECK(actual.dtype() == (floating && dtype == bf16 ? bf16 : expected.dtype()));
  Tensor on_host = actual.detach().cpu();
  if (on_host.dtype() == bf16) on_host = on_host.to(f32);
  std::string problem;
  const double error = gpu_test::normalised_error(on_host, expected.detach(), problem);
  const double tolerance = floating ? gpu_test::tolerance(dtype) * tolerance_scale : 0.0;
  INFO(problem);
  CHECK_MESSAGE(error <= tolerance, "normalised error " << error << " > tolerance " << tolerance);
  return error;
}

// The largest normalised errors of one case in one dtype (-1: nothing of that kind).
struct CaseErrors {
  double outputs = -1, gradients = -1;
};

std::string shown(double error) {
  if (error < 0) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", error);
  return text;
}

CaseErrors run_case(const OpCase& c, DType dtype) {
  CaseErrors errors;
  CaseInputs in = prepare(c, dtype);
  TensorList expected = c.f(in.reference);
  TensorList actual = c.f(in.device);
  if (actual.size() != expected.size()) {
    FAIL_CHECK(actual.size() << " outputs on the device, " << expected.size() << " on the CPU");
    return errors;
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    errors.outputs = std::max(errors.outputs, check_close(actual[i], expected[i], dtype, c.tolerance_scale,
                                                          "output " + std::to_string(i)));
  }
  const Tensor& out = expected.front();
  if (!ts::is_floating(out.dtype()) || !out.requires_grad()) return errors;
  ts::Generator gen(4242);
  Tensor seed_grad = ts::rand(out.sizes(), gen, {.dtype = f64}).to(dtype == bf16 ? bf16 : out.dtype());
  expected.front().backward(seed_grad.dtype() == bf16 ? seed_grad.to(f32) : seed_grad);
  actual.front().backward(seed_grad.to(gpu_test::target()));
  for (size_t i = 0; i < in.reference.size(); ++i) {
    if (!in.reference[i].requires_grad()) continue;
    errors.gradients = std::max(errors.gradients, check_close(in.device[i].grad(), in.reference[i].grad(), dtype,
                                                              c.tolerance_scale, "gradient of input " + std::to_string(i)));
  }
  return errors;
}

}  // namespace

TEST_CASE("every op on the device matches the CPU, outputs and gradients") {
  // The table of errors goes to stdout (meson's test log) on success too: it is the
  // record of a GPU run, for docs/gpu.md.
  std::printf("%-52s %-9s %-14s %s\n", "case", "dtype", "output error", "gradient error");
  for (const OpCase& c : op_cases()) {
    for (DType dtype : c.dtypes) {
      if (dtype == bf16 && !gpu_test::cuda_target()) continue;  // the CPU has no bfloat16 arithmetic
      CAPTURE(c.name);
      CAPTURE(dtype);
      try {
        const CaseErrors errors = run_case(c, dtype);
        std::printf("%-52s %-9s %-14s %s\n", c.name.c_str(), std::string(ts::dtype_name(dtype)).c_str(),
                    shown(errors.outputs).c_str(), shown(errors.gradients).c_str());
      } catch (const std::exception& e) {
        FAIL_CHECK("threw: " << std::string(e.what()));
        std::printf("%-52s %-9s threw: %s\n", c.name.c_str(), std::string(ts::dtype_name(dtype)).c_str(), e.what());
      }
    }
  }
}

TEST_CASE("the table reaches every backward node the library records") {
  std::set<std::string> recorded = test_support::recorded_backward_nodes();

  std::set<std::string> covered;
  for (const OpCase& c : op_cases()) {
    if (c.dtypes.front() == bf16) continue;
    CaseInputs in = prepare(c, c.dtypes.front());
    TensorList outputs = c.f(in.device);
    test_support::collect_node_names(outputs.front(), covered);
  }
  // Moving between devices records a node only when there are two devices.
  if (!gpu_test::cuda_target()) recorded.erase("ToDeviceBackward");
  for (const std::string& name : recorded) {
    CAPTURE(name);
    CHECK(covered.count(name) == 1);
  }
}

TEST_CASE("bfloat16 attention keeps its scores and log-sum-exp in float32") {
  if (!gpu_test::cuda_target()) return;  // the CPU has no bfloat16 attention
  // The products of bfloat16 values are exact in float32 and cuBLAS sums them in float32, so
  // the log-sum-exp equals the CPU's float32 one on the same rounded inputs to float32
  // rounding (gpu_test::tolerance(f32)); scores rounded to bfloat16 would be ~1e-3 off.
  const Tensor q = uniform({2, 3, 40, 16}, 177, f32).detach().to(bf16), k = uniform({2, 3, 50, 16}, 178, f32).detach().to(bf16);
  const Tensor v = uniform({2, 3, 50, 8}, 179, f32).detach().to(bf16);
  const native::AttentionOptions options{.is_causal = true, .scale = 0.7};
  auto [expected_out, expected_lse] = native::scaled_dot_product_attention(q.to(f32), k.to(f32), v.to(f32), options);
  const ts::Device device = gpu_test::target();
  auto [out, lse] = native::scaled_dot_product_attention(q.to(device), k.to(device), v.to(device), options);
  CHECK(out.dtype() == bf16);
  REQUIRE(lse.dtype() == f32);
  std::string problem;
  CHECK(gpu_test::normalised_error(lse.cpu(), expected_lse, problem) <= gpu_test::tolerance(f32));
  CHECK(gpu_test::normalised_error(out.cpu().to(f32), expected_out, problem) <= gpu_test::tolerance(bf16));
  // The backward takes it back in float32 and refuses a bfloat16 one, naming both dtypes.
  const Tensor grad = ts::ones_like(out);
  CHECK_NOTHROW(native::scaled_dot_product_attention_backward(grad, q.to(device), k.to(device), v.to(device), out, lse, options));
  CHECK_THROWS_WITH_AS(native::scaled_dot_product_attention_backward(grad, q.to(device), k.to(device), v.to(device), out,
                                                                     lse.to(bf16), options),
                       doctest::Contains("expected the log-sum-exp in float32 for bfloat16 operands, got bfloat16"),
                       ts::DTypeError);
}
