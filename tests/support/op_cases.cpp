// The op samples (op_cases.h says who reads them). Sections follow the library's op
// families; inside one, a sample that both suites take carries both flags. Inputs come
// from the seeds below, so a failure is reproducible from the sample's name alone.
#include "support/op_cases.h"

#include <limits>
#include <stdexcept>
#include <tessera/tensor/native.h>

namespace op_cases {

namespace ts = tessera;
namespace native = tessera::native;
using ts::DType;
using ts::Shape;
using ts::Tensor;

Tensor uniform(const Shape& shape, uint64_t seed, DType dtype, double low, double high, bool transposed) {
  ts::Generator gen(seed);
  Shape drawn = shape;
  if (transposed) {
    if (shape.size() < 2) throw std::invalid_argument("op_cases::uniform: a transposed input needs two dims");
    std::swap(drawn[drawn.size() - 1], drawn[drawn.size() - 2]);
  }
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

Tensor away_from_zero(const Shape& shape, uint64_t seed, DType dtype, bool transposed) {
  Tensor magnitude = uniform(shape, seed, dtype, 0.1, 1.0, transposed).detach();
  Tensor sign = uniform(shape, seed + 1000, dtype, -1, 1, transposed).detach();
  return ts::where(sign > ts::zeros({}, {.dtype = dtype}), magnitude, -magnitude).detach().requires_grad_();
}

namespace {

using TensorList = std::vector<Tensor>;

constexpr DType f32 = DType::f32, f64 = DType::f64, bf16 = DType::bf16, i64 = DType::i64, u8 = DType::u8,
                boolean = DType::boolean;
const std::vector<DType> floats = {f32, f64};

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

TensorList one(const Tensor& t) { return {t}; }

std::vector<OpCase> make_op_cases() {
  using L = const TensorList&;
  return {
      // ---- Element-wise, broadcasting, strided operands ----
      {"add broadcast", [](DType d) { return TensorList{uniform({2, 3}, 1, d), uniform({3}, 2, d)}; },
       [](L x) { return one(x[0] + x[1]); },
       {.gradcheck = true, .gpu = floats}},
      {"sub broadcast column, transposed",
       [](DType d) { return TensorList{uniform({3, 1}, 3, d), uniform({3, 4}, 4, d, -1, 1, true)}; },
       [](L x) { return one(x[0] - x[1]); },
       {.gradcheck = true, .gpu = floats}},
      {"mul non-contiguous",
       [](DType d) { return TensorList{uniform({3, 4}, 5, d, -1, 1, true), uniform({4}, 6, d)}; },
       [](L x) { return one(x[0] * x[1]); },
       {.gradcheck = true, .gpu = floats}},
      {"div", [](DType d) { return TensorList{uniform({2, 3}, 7, d), uniform({2, 1}, 8, d, 0.5, 2)}; },
       [](L x) { return one(x[0] / x[1]); },
       {.gradcheck = true, .gpu = floats}},
      {"pow tensor", [](DType d) { return TensorList{uniform({4}, 9, d, 0.5, 2), uniform({4}, 10, d)}; },
       [](L x) { return one(ts::pow(x[0], x[1])); },
       {.gradcheck = true, .gpu = floats}},
      {"pow scalar", [](DType d) { return TensorList{uniform({2, 3}, 11, d, 0.5, 2, true)}; },
       [](L x) { return one(x[0].pow(2.5)); },
       {.gradcheck = true, .gpu = floats}},
      {"maximum", [](DType d) { return TensorList{uniform({3, 3}, 12, d), uniform({3}, 13, d)}; },
       [](L x) { return one(ts::maximum(x[0], x[1])); },
       {.gradcheck = true, .gpu = floats}},
      {"minimum", [](DType d) { return TensorList{uniform({3, 3}, 14, d), uniform({3, 1}, 15, d)}; },
       [](L x) { return one(ts::minimum(x[0], x[1])); },
       {.gradcheck = true, .gpu = floats}},
      {"neg", [](DType d) { return TensorList{uniform({5}, 16, d)}; }, [](L x) { return one(-x[0]); },
       {.gradcheck = true, .gpu = floats}},
      {"abs", [](DType d) { return TensorList{away_from_zero({2, 4}, 17, d, true)}; },
       [](L x) { return one(x[0].abs()); },
       {.gradcheck = true, .gpu = floats}},
      {"exp", [](DType d) { return TensorList{uniform({2, 3}, 18, d)}; }, [](L x) { return one(x[0].exp()); },
       {.gradcheck = true, .gpu = floats}},
      {"log", [](DType d) { return TensorList{uniform({2, 3}, 19, d, 0.5, 3)}; },
       [](L x) { return one(x[0].log()); },
       {.gradcheck = true, .gpu = floats}},
      {"sqrt", [](DType d) { return TensorList{uniform({2, 3}, 20, d, 0.5, 3, true)}; },
       [](L x) { return one(x[0].sqrt()); },
       {.gradcheck = true, .gpu = floats}},
      {"relu", [](DType d) { return TensorList{away_from_zero({3, 4}, 21, d)}; },
       [](L x) { return one(ts::relu(x[0])); },
       {.gradcheck = true, .gpu = floats}},
      {"relu: NaN and signed zeros (PyTorch keeps both, and passes NaN's gradient)",
       [](DType d) {
         const double nan = std::numeric_limits<double>::quiet_NaN();
         return TensorList{constant({nan, -0.0, 0.0, -2.0, 3.0, nan}, {6}, d).requires_grad_()};
       },
       [](L x) { return one(ts::relu(x[0])); },
       {.gpu = floats}},
      {"sigmoid", [](DType d) { return TensorList{uniform({6}, 22, d, -3, 3)}; },
       [](L x) { return one(ts::sigmoid(x[0])); },
       {.gradcheck = true, .gpu = floats}},
      {"tanh", [](DType d) { return TensorList{uniform({6}, 23, d, -2, 2)}; },
       [](L x) { return one(ts::tanh(x[0])); },
       {.gradcheck = true, .gpu = floats}},
      {"sin cos", [](DType d) { return TensorList{uniform({9}, 27, d, -4, 4)}; },
       [](L x) { return TensorList{ts::sin(x[0]), ts::cos(x[0])}; },
       {.gpu = floats}},
      {"clamp silu logsumexp var", [](DType d) { return TensorList{uniform({4, 6}, 28, d, -2, 2)}; },
       [](L x) {
         return TensorList{ts::clamp(x[0], -0.5, 0.5), ts::silu(x[0]), ts::logsumexp(x[0], {1}), ts::var(x[0], {0})};
       },
       {.gpu = floats}},
      {"conv1d avg_pool2d group_norm", [](DType d) { return TensorList{uniform({2, 4, 6, 6}, 29, d)}; },
       [](L x) {
         return TensorList{ts::avg_pool2d(x[0], 3, 2, 1), ts::group_norm(x[0], 2),
                           ts::conv1d(x[0].flatten(2), x[0].narrow(0, 0, 1).reshape({3, 4, 12}).narrow(2, 0, 3))};
       },
       {.gpu = floats}},
      {"sign and reciprocal (native)", [](DType d) { return TensorList{away_from_zero({7}, 24, d)}; },
       [](L x) {
         return TensorList{native::unary(native::UnaryOp::sign, x[0].detach()),
                           native::unary(native::UnaryOp::reciprocal, x[0].detach())};
       },
       {.gpu = floats}},
      {"where", [](DType d) { return TensorList{uniform({2, 3}, 24, d), uniform({3}, 25, d)}; },
       [](L x) { return one(ts::where(ts::tensor<bool>({true, false, true, false, false, true}, {2, 3}).to(x[0].device()), x[0], x[1])); },
       {.gradcheck = true, .gpu = floats}},
      {"scalar forms", [](DType d) { return TensorList{uniform({4}, 26, d, 0.5, 2)}; },
       [](L x) { return one((x[0] + 1.5) * 2.0 - 0.5 + (3.0 / x[0]) + x[0] / 4.0 + (1.0 - x[0])); },
       {.gradcheck = true, .gpu = floats}},
      {"comparisons",
       [](DType d) { return TensorList{small_integers({4, 5}, 28, d), small_integers({5}, 29, d)}; },
       [](L x) {
         return TensorList{ts::eq(x[0], x[1]), ts::ne(x[0], x[1]), ts::lt(x[0], x[1]),
                           ts::le(x[0], x[1]), ts::gt(x[0], x[1]), ts::ge(x[0], x[1])};
       },
       {.gpu = floats}},
      {"in-place updates", [](DType d) { return TensorList{uniform({3, 4}, 30, d), uniform({4}, 31, d, 0.5, 2)}; },
       [](L x) {
         ts::NoGradGuard no_grad;
         Tensor t = x[0].detach().clone();
         t.add_(x[1]).mul_(2.0).sub_(x[1], 0.5).div_(x[1]).add_(0.25).div_(3.0).mul_(x[1]);
         Tensor filled = x[0].detach().clone().fill_(1.5);
         Tensor zeroed = x[0].detach().clone().zero_();
         Tensor copied = ts::zeros({2, 3, 4}, {.dtype = x[0].dtype(), .device = x[0].device()});
         copied.copy_(x[1]);  // broadcast
         return TensorList{t, filled, zeroed, copied};
       },
       {.gpu = floats}},
      {"large, vectorised with a tail",
       [](DType d) { return TensorList{uniform({1000003}, 32, d), uniform({1000003}, 33, d)}; },
       [](L x) { return one(ts::sigmoid(x[0] * x[1] + x[0])); },
       {.gpu = floats}},
      {"misaligned views", [](DType d) { return TensorList{uniform({4099}, 34, d), uniform({4099}, 35, d)}; },
       [](L x) { return one(x[0].narrow(0, 1, 4097) * x[1].narrow(0, 2, 4097) - x[0].narrow(0, 0, 4097)); },
       {.gpu = floats}},
      {"integer arithmetic",
       [](DType d) {
         return TensorList{small_integers({3, 4}, 36, d, 0, 10), small_integers({4}, 37, d, 0, 10)};
       },
       [](L x) {
         return TensorList{x[0] + x[1], x[0] - x[1], x[0] * x[1], ts::maximum(x[0], x[1]), ts::minimum(x[0], x[1]),
                           -x[0], x[0].abs(), native::unary(native::UnaryOp::sign, x[0]), ts::eq(x[0], x[1]),
                           ts::lt(x[0], x[1]), x[0].sum(), x[0].sum({0}), ts::where(ts::gt(x[0], x[1]), x[0], x[1]),
                           std::get<0>(x[0].max(1)), std::get<1>(x[0].max(1)), x[0].to(DType::f32)};
       },
       {.gpu = {i64, u8}}},
      {"bool masks: logical ops, where, sum, conversions",
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
       },
       {.gpu = {boolean}}},
      {"integer in-place",
       [](DType d) { return TensorList{small_integers({5, 3}, 38, d, 0, 9), small_integers({3}, 39, d, 1, 9)}; },
       [](L x) {
         Tensor t = x[0].clone();
         t.add_(x[1], 2.0).mul_(x[1]).sub_(x[1]).add_(3.0);
         return one(t);
       },
       {.gpu = {i64}}},
      // ---- Reductions ----
      {"sum all", [](DType d) { return TensorList{uniform({2, 3}, 27, d, -1, 1, true)}; },
       [](L x) { return one(x[0].sum()); },
       {.gradcheck = true, .gpu = floats}},
      {"sum dims keepdim", [](DType d) { return TensorList{uniform({2, 3, 4}, 28, d)}; },
       [](L x) { return one(x[0].sum({0, 2}, true)); },
       {.gradcheck = true, .gpu = floats}},
      {"sum long rows (split across blocks)", [](DType d) { return TensorList{uniform({2, 100000}, 42, d)}; },
       [](L x) { return one(x[0].sum({1})); },
       {.gpu = floats}},
      {"sum short rows (a thread per row)", [](DType d) { return TensorList{uniform({5000, 3}, 43, d)}; },
       [](L x) { return one(x[0].sum({1})); },
       {.gpu = floats}},
      {"sum leading dim", [](DType d) { return TensorList{uniform({64, 50}, 44, d)}; },
       [](L x) { return one(x[0].sum({0})); },
       {.gpu = floats}},
      // Sums that read the input in place: columns (one part, and long columns in parts),
      // two leading dims, and around a middle dim (a convolution's bias gradient).
      {"sum leading dims in place",
       [](DType d) { return TensorList{uniform({8, 30}, 160, d), uniform({20000, 3}, 161, d), uniform({4, 6, 10}, 162, d)}; },
       [](L x) { return TensorList{x[0].sum({0}), x[1].sum({0}), x[2].sum({0, 1})}; },
       {.gpu = floats}},
      {"sum around a middle dim in place",
       [](DType d) { return TensorList{uniform({2, 3, 5, 7}, 163, d), uniform({3, 2, 40000}, 164, d)}; },
       [](L x) { return TensorList{x[0].sum({0, 2, 3}), x[1].sum({0, 2})}; },
       {.gpu = floats}},
      {"mean dim", [](DType d) { return TensorList{uniform({3, 4}, 29, d, -1, 1, true)}; },
       [](L x) { return one(x[0].mean({1})); },
       {.gradcheck = true, .gpu = floats}},
      {"amax", [](DType d) { return TensorList{uniform({3, 5}, 30, d)}; },
       [](L x) { return one(x[0].amax({1})); },
       {.gradcheck = true, .gpu = floats}},
      {"max dim", [](DType d) { return TensorList{uniform({4, 3}, 31, d, -1, 1, true)}; },
       [](L x) {
         auto [values, indices] = x[0].max(0);
         return TensorList{values, indices, x[0].argmax(1), x[0].argmax()};
       },
       {.gradcheck = true, .gpu = floats}},
      {"max: ties and NaNs, short, block and split rows",
       [](DType d) { return TensorList{ties_and_nans(5, d), ties_and_nans(300, d), ties_and_nans(70000, d)}; },
       [](L x) {
         TensorList out;
         for (const Tensor& t : x) {
           auto [values, indices] = t.max(1);
           out.insert(out.end(), {values, indices, t.amax({1})});
         }
         return out;
       },
       {.gpu = floats}},
      {"empty tensors", [](DType d) { return TensorList{uniform({0, 3}, 48, d)}; },
       [](L x) { return TensorList{(x[0] + 1.0).sum({0}), x[0].sum({1}), x[0] * 2.0}; },
       {.gpu = floats}},
      // ---- Linear algebra ----
      {"matmul 2-D", [](DType d) { return TensorList{uniform({3, 4}, 32, d), uniform({4, 2}, 33, d, -1, 1, true)}; },
       [](L x) { return one(ts::matmul(x[0], x[1])); },
       {.gradcheck = true, .gpu = floats}},
      {"matmul batched broadcast",
       [](DType d) { return TensorList{uniform({2, 3, 4}, 34, d), uniform({4, 5}, 35, d)}; },
       [](L x) { return one(ts::matmul(x[0], x[1])); },
       {.gradcheck = true, .gpu = floats}},
      {"matmul broadcast batch dims (copied)",
       [](DType d) { return TensorList{uniform({2, 1, 3, 4}, 54, d), uniform({1, 5, 4, 2}, 55, d)}; },
       [](L x) { return one(ts::matmul(x[0], x[1])); },
       {.gpu = floats}},
      {"matmul vectors",
       [](DType d) { return TensorList{uniform({4}, 36, d), uniform({4, 3}, 37, d), uniform({3}, 38, d)}; },
       [](L x) { return one(ts::matmul(ts::matmul(x[0], x[1]), x[2])); },
       {.gradcheck = true, .gpu = floats}},
      {"matmul transposed operands, larger",
       [](DType d) { return TensorList{uniform({300, 64}, 59, d), uniform({70, 300}, 60, d)}; },
       [](L x) { return one(ts::matmul(x[0].t(), x[1].t())); },
       {.gpu = floats}},
      {"linear",
       [](DType d) { return TensorList{uniform({2, 3, 4}, 39, d), uniform({5, 4}, 40, d), uniform({5}, 41, d)}; },
       [](L x) { return one(ts::linear(x[0], x[1], x[2])); },
       {.gradcheck = true, .gpu = floats}},
      {"linear no bias, transposed weight",
       [](DType d) { return TensorList{uniform({3, 4}, 42, d), uniform({5, 4}, 43, d, -1, 1, true)}; },
       [](L x) { return one(ts::linear(x[0], x[1])); },
       {.gradcheck = true, .gpu = floats}},
      {"linear, a bias that is a view at an odd offset (no cuBLASLt epilogue)",
       [](DType d) { return TensorList{uniform({6, 8}, 165, d), uniform({7, 8}, 166, d), uniform({8}, 167, d)}; },
       [](L x) { return one(ts::linear(x[0], x[1], x[2].narrow(0, 1, 7))); },
       {.gpu = floats}},
      {"linear, MNIST-sized",
       [](DType d) { return TensorList{uniform({16, 1152}, 66, d), uniform({128, 1152}, 67, d, -0.03, 0.03), uniform({128}, 68, d)}; },
       [](L x) { return one(ts::linear(x[0], x[1], x[2])); },
       {.gpu = floats}},
      // ---- Convolution and pooling ----
      {"conv2d",
       [](DType d) { return TensorList{uniform({2, 3, 6, 5}, 44, d), uniform({4, 3, 3, 3}, 45, d), uniform({4}, 46, d)}; },
       [](L x) { return one(ts::conv2d(x[0], x[1], x[2])); },
       {.gradcheck = true, .gpu = floats, .gpu_tolerance_scale = kWinograd}},
      {"conv2d stride padding dilation",
       [](DType d) { return TensorList{uniform({1, 2, 7, 7}, 47, d), uniform({3, 2, 3, 2}, 48, d)}; },
       [](L x) { return one(ts::conv2d(x[0], x[1], {}, {.stride = {2, 1}, .padding = {1, 2}, .dilation = {2, 1}})); },
       {.gradcheck = true, .gpu = floats, .gpu_tolerance_scale = kWinograd}},
      {"conv2d, MNIST-sized",
       [](DType d) { return TensorList{uniform({8, 32, 26, 26}, 75, d), uniform({64, 32, 3, 3}, 76, d, -0.06, 0.06), uniform({64}, 77, d)}; },
       [](L x) { return one(ts::conv2d(x[0], x[1], x[2])); },
       {.gpu = floats, .gpu_tolerance_scale = kWinograd}},
      {"max_pool2d", [](DType d) { return TensorList{uniform({2, 2, 6, 6}, 49, d)}; },
       [](L x) { return one(ts::max_pool2d(x[0], 2)); },
       {.gradcheck = true, .gpu = floats}},
      {"max_pool2d stride padding", [](DType d) { return TensorList{uniform({1, 2, 7, 5}, 50, d)}; },
       [](L x) { return one(ts::max_pool2d(x[0], 3, ts::Size2(2), 1)); },
       {.gradcheck = true, .gpu = floats}},
      {"max_pool2d overlapping windows", [](DType d) { return TensorList{uniform({2, 3, 9, 8}, 80, d)}; },
       [](L x) { return one(ts::max_pool2d(x[0], 3, ts::Size2(1))); },
       {.gpu = floats}},
      {"max_pool2d ties and NaNs (indices)",
       [](DType d) { return TensorList{ties_and_nans(16, d).view({1, 3, 4, 4})}; },
       [](L x) {
         auto [out, indices] = native::max_pool2d(x[0], {.kernel = 2, .stride = 2, .padding = 0});
         auto [out_padded, indices_padded] = native::max_pool2d(x[0], {.kernel = 3, .stride = 1, .padding = 1});
         return TensorList{out, indices, out_padded, indices_padded};
       },
       {.gpu = floats}},
      {"adaptive_avg_pool2d to 1x1", [](DType d) { return TensorList{uniform({2, 3, 4, 5}, 69, d)}; },
       [](L x) { return one(ts::adaptive_avg_pool2d(x[0], 1)); },
       {.gradcheck = true, .gpu = floats}},
      {"adaptive_avg_pool2d overlapping bins, non-contiguous", [](DType d) { return TensorList{uniform({1, 2, 5, 7}, 70, d, -1, 1, true)}; },
       [](L x) { return one(ts::adaptive_avg_pool2d(x[0], {3, 4})); },
       {.gradcheck = true}},
      {"adaptive_avg_pool2d overlapping bins", [](DType d) { return TensorList{uniform({1, 2, 5, 7}, 85, d)}; },
       [](L x) { return one(ts::adaptive_avg_pool2d(x[0], {3, 4})); },
       {.gpu = floats}},
      // ---- Batch normalisation (running statistics made on the inputs' device) ----
      {"batch_norm train, running statistics updated",
       [](DType d) { return TensorList{uniform({4, 3, 5, 5}, 86, d), uniform({3}, 87, d, 0.5, 1.5), uniform({3}, 88, d)}; },
       [](L x) {
         Tensor mean = ts::zeros_like(x[1]), var = ts::ones_like(x[1]);
         Tensor y = ts::batch_norm(x[0], mean, var, x[1], x[2], true, 0.1, 1e-5);
         return TensorList{y, mean, var};
       },
       {.gpu = floats}},
      {"batch_norm eval",
       [](DType d) { return TensorList{uniform({2, 3, 4, 4}, 89, d), uniform({3}, 90, d, 0.5, 1.5), uniform({3}, 91, d)}; },
       [](L x) {
         Tensor mean = ts::full_like(x[1], 0.25), var = ts::full_like(x[1], 2.0);
         return one(ts::batch_norm(x[0], mean, var, x[1], x[2], false, 0.1, 1e-5));
       },
       {.gradcheck = true, .gpu = floats}},
      // Batch norm: the running statistics are buffers (no gradient); in training the
      // output depends on them not at all, in eval only through constants.
      {"batch_norm train", [](DType d) { return TensorList{uniform({3, 2, 2, 3}, 71, d), uniform({2}, 72, d, 0.5, 1.5), uniform({2}, 73, d)}; },
       [](L x) {
         Tensor mean = ts::zeros({2}, {.dtype = DType::f64}), var = ts::ones({2}, {.dtype = DType::f64});
         return one(ts::batch_norm(x[0], mean, var, x[1], x[2], true, 0.1, 1e-5));
       },
       {.gradcheck = true}},
      {"batch_norm train without affine or running stats, 2-D", [](DType d) { return TensorList{uniform({5, 3}, 74, d)}; },
       [](L x) { return one(ts::batch_norm(x[0], {}, {}, {}, {}, true)); },
       {.gradcheck = true}},
      {"batch_norm eval, per-channel statistics, non-contiguous", [](DType d) { return TensorList{uniform({2, 3, 2, 2}, 75, d, -1, 1, true), uniform({3}, 76, d, 0.5, 1.5), uniform({3}, 77, d)}; },
       [](L x) {
         Tensor mean = constant({0.1, -0.2, 0.3}, {3}, x[1].dtype()).to(x[1].device());
         Tensor var = constant({0.5, 1.5, 2.0}, {3}, x[1].dtype()).to(x[1].device());
         return one(ts::batch_norm(x[0], mean, var, x[1], x[2], false, 0.1, 1e-5));
       },
       {.gradcheck = true, .gpu = floats}},
      // ---- Softmax family and losses ----
      {"softmax", [](DType d) { return TensorList{uniform({3, 5}, 51, d, -2, 2, true)}; },
       [](L x) { return one(ts::softmax(x[0], 1)); },
       {.gradcheck = true, .gpu = floats}},
      {"log_softmax dim 0", [](DType d) { return TensorList{uniform({4, 3}, 52, d, -2, 2)}; },
       [](L x) { return one(ts::log_softmax(x[0], 0)); },
       {.gradcheck = true, .gpu = floats}},
      {"softmax middle dim", [](DType d) { return TensorList{uniform({2, 5, 3}, 83, d, -2, 2)}; },
       [](L x) { return one(ts::softmax(x[0], 1)); },
       {.gpu = floats}},
      {"log_softmax long rows", [](DType d) { return TensorList{uniform({8, 1000}, 84, d, -5, 5)}; },
       [](L x) { return one(ts::log_softmax(x[0], -1)); },
       {.gpu = floats}},
      {"nll_loss mean", [](DType d) { return TensorList{uniform({4, 3}, 53, d)}; },
       [](L x) { return one(ts::nll_loss(x[0], labels({0, 2, 1, 2}).to(x[0].device()))); },
       {.gradcheck = true, .gpu = floats}},
      {"nll_loss weighted, ignore_index", [](DType d) { return TensorList{uniform({4, 3}, 54, d)}; },
       [](L x) {
         Tensor weight = constant({0.2, 1.0, 3.0}, {3}, x[0].dtype()).to(x[0].device());
         return one(ts::nll_loss(x[0], labels({0, 2, -100, 1}).to(x[0].device()), {.weight = weight}));
       },
       {.gradcheck = true, .gpu = floats}},
      {"nll_loss none", [](DType d) { return TensorList{uniform({3, 4}, 55, d)}; },
       [](L x) {
         return one(ts::nll_loss(x[0], labels({3, 0, 1}).to(x[0].device()), {.weight = {}, .reduction = ts::Reduction::none}));
       },
       {.gradcheck = true, .gpu = floats}},
      {"nll_loss sum", [](DType d) { return TensorList{uniform({3, 4}, 56, d)}; },
       [](L x) {
         return one(ts::nll_loss(x[0], labels({3, 0, 1}).to(x[0].device()), {.weight = {}, .reduction = ts::Reduction::sum}));
       },
       {.gradcheck = true, .gpu = floats}},
      {"cross_entropy", [](DType d) { return TensorList{uniform({5, 4}, 57, d, -2, 2)}; },
       [](L x) { return one(ts::cross_entropy(x[0], labels({0, 1, 2, 3, 0}))); },
       {.gradcheck = true}},
      // Without label smoothing cross_entropy is one fused node: each of its options.
      {"cross_entropy weighted, ignore_index", [](DType d) { return TensorList{uniform({5, 4}, 59, d, -2, 2)}; },
       [](L x) {
         return one(ts::cross_entropy(x[0], labels({0, 2, 1, 3, 2}),
                                  {.weight = ts::tensor<double>({0.5, 1.0, 2.0, 1.5}), .ignore_index = 1}));
       },
       {.gradcheck = true}},
      {"cross_entropy [N, C, d] sum and none", [](DType d) { return TensorList{uniform({2, 3, 4}, 60, d, -2, 2)}; },
       [](L x) {
         Tensor t = ts::tensor<int64_t>({0, 2, 1, -100, 2, 2, 0, 1}, {2, 4});
         return one(ts::cross_entropy(x[0], t, {.reduction = ts::Reduction::sum}) +
                (ts::cross_entropy(x[0], t, {.reduction = ts::Reduction::none}) * ts::arange(4, {.dtype = DType::f64}))
                    .sum());
       },
       {.gradcheck = true}},
      {"cross_entropy of one score vector [C]", [](DType d) { return TensorList{uniform({5}, 61, d, -2, 2)}; },
       [](L x) { return one(ts::cross_entropy(x[0], ts::full({}, 2, {.dtype = DType::i64}))); },
       {.gradcheck = true}},
      {"cross_entropy, a batch of 64", [](DType d) { return TensorList{uniform({64, 10}, 89, d, -3, 3)}; },
       [](L x) {
         std::vector<int64_t> targets(64);
         for (int64_t i = 0; i < 64; ++i) targets[i] = (i * 7) % 10;
         return one(ts::cross_entropy(x[0], labels(targets).to(x[0].device())));
       },
       {.gpu = floats}},
      {"dropout", [](DType d) { return TensorList{uniform({4, 6}, 58, d)}; },
       [](L x) { return one(ts::dropout(x[0], 0.3, true, {.seed = 1, .stream = 2, .step = 3})); },
       {.gradcheck = true, .gpu = floats}},
      {"dropout masks, many rows, offset rows", [](DType d) { return TensorList{uniform({64, 1001}, 91, d)}; },
       [](L x) {
         auto [out, mask] = native::dropout(x[0].detach(), 0.5, {.seed = 7, .stream = 8, .step = (1ull << 33) + 5, .first_row = 1000});
         auto [none_dropped, keep_all] = native::dropout(x[0].detach(), 0.0, {.seed = 7});
         auto [all_dropped, keep_none] = native::dropout(x[0].detach(), 1.0, {.seed = 7});
         return TensorList{out, mask, none_dropped, keep_all, all_dropped, keep_none};
       },
       {.gpu = floats}},
      // ---- Transformer layers: layer norm, GELU, erf, embedding ----
      {"layer_norm",
       [](DType d) { return TensorList{uniform({4, 7, 33}, 120, d, -2, 2), uniform({33}, 121, d, 0.5, 1.5), uniform({33}, 122, d)}; },
       [](L x) { return one(ts::layer_norm(x[0], {33}, x[1], x[2])); },
       {.gradcheck = true, .gpu = floats}},
      {"layer_norm GPT-2 width, 200 rows (chunked weight gradient)",
       [](DType d) { return TensorList{uniform({200, 768}, 123, d, -1, 3), uniform({768}, 124, d, 0.5, 1.5), uniform({768}, 125, d)}; },
       [](L x) { return one(ts::layer_norm(x[0], {768}, x[1], x[2])); },
       {.gpu = floats}},
      {"layer_norm two dims, no affine, transposed; weight only",
       [](DType d) { return TensorList{uniform({3, 4, 6}, 126, d, -1, 1, true), uniform({6}, 127, d, 0.5, 1.5)}; },
       [](L x) { return one(ts::layer_norm(x[0], {4, 6}) + ts::layer_norm(x[0], {6}, x[1])); },
       {.gpu = floats}},
      {"layer_norm saved statistics (native)", [](DType d) { return TensorList{uniform({5, 300}, 128, d, -4, 6)}; },
       [](L x) {
         auto [out, mean, rstd] = native::layer_norm(x[0].detach(), {300}, {}, {}, 1e-5);
         return TensorList{out, mean, rstd};
       },
       {.gpu = floats}},
      {"gelu, gelu tanh, erf", [](DType d) { return TensorList{uniform({3, 1001}, 129, d, -6, 6)}; },
       [](L x) { return TensorList{ts::gelu(x[0]) + ts::gelu(x[0], "tanh") * 0.5 + x[0].erf(), ts::gelu(x[0], "tanh")}; },
       {.gpu = floats}},
      {"gelu transposed", [](DType d) { return TensorList{uniform({5, 8}, 130, d, -3, 3, true)}; },
       [](L x) { return one(ts::gelu(x[0])); },
       {.gpu = floats}},
      {"layer_norm, short rows", [](DType d) { return TensorList{uniform({3, 2, 5}, 101, d, -2, 2), uniform({5}, 102, d, 0.5, 1.5), uniform({5}, 103, d)}; },
       [](L x) { return one(ts::layer_norm(x[0], {5}, x[1], x[2])); },
       {.gradcheck = true, .gpu = floats}},
      {"layer_norm two dims, no affine, non-contiguous", [](DType d) { return TensorList{uniform({2, 3, 4}, 104, d, -1, 1, true)}; },
       [](L x) { return one(ts::layer_norm(x[0], {3, 4}, {}, {}, 1e-3)); },
       {.gradcheck = true}},
      {"layer_norm weight only, long rows", [](DType d) { return TensorList{uniform({2, 37}, 105, d, -1, 3), uniform({37}, 106, d, 0.5, 1.5)}; },
       [](L x) { return one(ts::layer_norm(x[0], {37}, x[1])); },
       {.gradcheck = true}},
      {"gelu", [](DType d) { return TensorList{uniform({3, 7}, 107, d, -3, 3, true)}; }, [](L x) { return one(ts::gelu(x[0])); },
       {.gradcheck = true}},
      {"gelu tanh", [](DType d) { return TensorList{uniform({9}, 108, d, -4, 4)}; }, [](L x) { return one(ts::gelu(x[0], "tanh")); },
       {.gradcheck = true}},
      {"erf", [](DType d) { return TensorList{uniform({2, 5}, 109, d, -2, 2)}; }, [](L x) { return one(x[0].erf()); },
       {.gradcheck = true}},
      // Embedding's padding_idx and scale_grad_by_freq change the gradient on purpose (no
      // longer the derivative), so the gradcheck takes only the plain lookups; the gpu suite
      // and tests/golden check those options.
      {"embedding, repeated indices, fixed ids", [](DType d) { return TensorList{uniform({6, 3}, 110, d)}; },
       [](L x) { return one(ts::embedding(labels({4, 0, 4, 5, 2, 4}, {2, 3}).to(x[0].device()), x[0])); },
       {.gradcheck = true, .gpu = floats}},
      {"embedding, repeated indices",
       [](DType d) { return TensorList{uniform({10, 6}, 131, d), uniform({3, 5}, 132, i64, 0, 10)}; },
       [](L x) { return one(ts::embedding(x[1], x[0])); },
       {.gradcheck = true, .gpu = floats}},
      {"embedding, many repeats (sorted segments)",
       [](DType d) { return TensorList{uniform({1000, 64}, 133, d), uniform({8, 128}, 134, i64, 0, 50)}; },
       [](L x) { return one(ts::embedding(x[1], x[0])); },
       {.gpu = floats}},
      {"embedding padding_idx, scale_grad_by_freq",
       [](DType d) { return TensorList{uniform({7, 9}, 135, d), uniform({40}, 136, i64, 0, 7)}; },
       [](L x) { return one(ts::embedding(x[1], x[0], {.padding_idx = 3, .scale_grad_by_freq = true})); },
       {.gpu = floats}},
      {"embedding max_norm (rows renormalised in place)",
       [](DType d) { return TensorList{uniform({12, 5}, 137, d, -2, 2), uniform({2, 9}, 138, i64, 0, 12)}; },
       [](L x) {
         Tensor out = ts::embedding(x[1], x[0], {.max_norm = 1.0});
         Tensor out_p1 = ts::embedding(x[1], x[0].detach(), {.max_norm = 0.5, .norm_type = 1.0});
         return TensorList{out, out_p1, x[0].detach().clone()};
       },
       {.gpu = floats}},
      // The ops a model author missed (issue 29): sin and cos are nodes of their own, the
      // rest composites checked end to end. Values stay away from clamp's bounds and from
      // ties (the derivative's kinks).
      {"sin cos, non-contiguous", [](DType d) { return TensorList{uniform({3, 4}, 120, d, -4, 4, true)}; },
       [](L x) { return one(x[0].sin() * 2.0 + ts::cos(x[0] * 1.5)); },
       {.gradcheck = true}},
      {"clamp both bounds", [](DType d) { return TensorList{away_from_zero({4, 6}, 121, d)}; },
       [](L x) { return one(ts::clamp(x[0], -0.55, 0.45) * 2.0 + x[0].clamp_min(0.05) + x[0].clamp_max(-0.05)); },
       {.gradcheck = true}},
      {"silu", [](DType d) { return TensorList{uniform({7}, 122, d, -4, 4)}; }, [](L x) { return one(ts::silu(x[0])); },
       {.gradcheck = true}},
      {"logsumexp over two dims, keepdim", [](DType d) { return TensorList{uniform({3, 4, 5}, 123, d, -3, 3, true)}; },
       [](L x) { return one(ts::logsumexp(x[0], {0, 2}, true) + x[0].logsumexp({-1}).sum()); },
       {.gradcheck = true}},
      {"var std, corrections", [](DType d) { return TensorList{uniform({4, 6}, 124, d)}; },
       [](L x) { return one(ts::var(x[0], {1}) * 2.0 + x[0].std({0}, 0, true).sum() + ts::var(x[0])); },
       {.gradcheck = true}},
      {"amin min argmin-picked", [](DType d) { return TensorList{uniform({4, 5}, 125, d)}; },
       [](L x) { return one(ts::amin(x[0], {1}) * 2.0 + std::get<0>(x[0].min(0)).sum()); },
       {.gradcheck = true}},
      {"sort values, descending", [](DType d) { return TensorList{uniform({3, 6}, 126, d)}; },
       [](L x) {
         return one(std::get<0>(x[0].sort(-1)) * ts::arange(18, {.dtype = DType::f64}).view({3, 6}) +
                std::get<0>(ts::sort(x[0], 0, true)).sum());
       },
       {.gradcheck = true}},
      {"mse l1 losses", [](DType d) { return TensorList{uniform({3, 4}, 127, d), away_from_zero({3, 4}, 128, d)}; },
       [](L x) { return one(ts::mse_loss(x[0], x[1]) + ts::l1_loss(x[0] * 0.0 + x[1] * 2.0, x[1], ts::Reduction::sum)); },
       {.gradcheck = true}},
      {"binary_cross_entropy with weight", [](DType d) { return TensorList{uniform({3, 4}, 129, d, 0.05, 0.95), uniform({3, 4}, 130, d, 0, 1)}; },
       [](L x) { return one(ts::binary_cross_entropy(x[0], x[1], ts::full({4}, 1.5, {.dtype = DType::f64}))); },
       {.gradcheck = true}},
      {"binary_cross_entropy_with_logits, pos_weight", [](DType d) { return TensorList{uniform({3, 4}, 131, d, -4, 4), uniform({4}, 132, d, 0.5, 2)}; },
       [](L x) {
         ts::Generator gen(7);
         Tensor target = ts::rand({3, 4}, gen, {.dtype = DType::f64});
         return one(ts::binary_cross_entropy_with_logits(x[0], target, {.pos_weight = x[1], .reduction = ts::Reduction::sum}));
       },
       {.gradcheck = true}},
      {"conv1d strided, dilated, padded", [](DType d) { return TensorList{uniform({2, 3, 11}, 133, d), uniform({4, 3, 3}, 134, d), uniform({4}, 135, d)}; },
       [](L x) { return one(ts::conv1d(x[0], x[1], x[2], {.stride = 2, .padding = 2, .dilation = 2})); },
       {.gradcheck = true}},
      {"avg_pool2d padded, padding excluded", [](DType d) { return TensorList{uniform({2, 2, 5, 6}, 136, d)}; },
       [](L x) {
         return one(ts::avg_pool2d(x[0], 3, 2, 1) + ts::avg_pool2d(x[0], 3, 2, 1, {.count_include_pad = false}) * 2.0);
       },
       {.gradcheck = true}},
      {"group_norm", [](DType d) { return TensorList{uniform({2, 6, 3, 2}, 137, d), uniform({6}, 138, d, 0.5, 1.5), uniform({6}, 139, d)}; },
       [](L x) { return one(ts::group_norm(x[0], 3, x[1], x[2])); },
       {.gradcheck = true}},
      // ---- Views, copies, conversions, devices, joins ----
      {"view reshape flatten", [](DType d) { return TensorList{uniform({2, 3, 4}, 59, d)}; },
       [](L x) { return one(x[0].view({6, 4}).reshape({4, 6}).flatten() * ts::arange(24, {.dtype = x[0].dtype(), .device = x[0].device()})); },
       {.gradcheck = true, .gpu = floats}},
      {"reshape of non-contiguous", [](DType d) { return TensorList{uniform({3, 4}, 60, d, -1, 1, true)}; },
       [](L x) { return one(x[0].reshape({12}) * ts::arange(12, {.dtype = x[0].dtype(), .device = x[0].device()})); },
       {.gradcheck = true, .gpu = floats}},
      {"narrow select", [](DType d) { return TensorList{uniform({4, 5}, 61, d)}; },
       [](L x) { return one(x[0].narrow(1, 1, 3).select(0, 2) * 3.0 + x[0].select(1, -1).sum()); },
       {.gradcheck = true, .gpu = floats}},
      {"transpose permute t", [](DType d) { return TensorList{uniform({2, 3, 4}, 62, d)}; },
       [](L x) {
         return one(x[0].permute({2, 0, 1}).transpose(0, 2).select(2, 1).t() * ts::arange(6, {.dtype = x[0].dtype(), .device = x[0].device()}).view({2, 3}));
       },
       {.gradcheck = true, .gpu = floats}},
      {"flip, non-contiguous", [](DType d) { return TensorList{uniform({2, 3, 4}, 306, d, -1, 1, true)}; },
       [](L x) {
         return TensorList{ts::flip(x[0], {0, -1}) * ts::arange(24, {.dtype = x[0].dtype(), .device = x[0].device()}).view({2, 3, 4}),
                           ts::flip(x[0], {1}), ts::flip(x[0], {})};
       },
       {.gradcheck = true, .gpu = floats}},
      {"squeeze unsqueeze", [](DType d) { return TensorList{uniform({3, 1, 2}, 63, d)}; },
       [](L x) { return one(x[0].squeeze(1).unsqueeze(0).squeeze() * 2.0 + x[0].squeeze().sum()); },
       {.gradcheck = true}},
      {"expand", [](DType d) { return TensorList{uniform({3, 1}, 64, d)}; },
       [](L x) { return one(x[0].expand({2, 3, 4}) * ts::arange(24, {.dtype = DType::f64}).view({2, 3, 4})); },
       {.gradcheck = true}},
      {"squeeze unsqueeze expand", [](DType d) { return TensorList{uniform({3, 1}, 96, d)}; },
       [](L x) { return one(x[0].squeeze(1).unsqueeze(0).expand({2, 3}) * x[0].expand({2, 3, 4}).sum({2}).squeeze()); },
       {.gpu = floats}},
      {"contiguous clone", [](DType d) { return TensorList{uniform({3, 4}, 65, d, -1, 1, true)}; },
       [](L x) { return one(x[0].contiguous().clone() * ts::arange(12, {.dtype = x[0].dtype(), .device = x[0].device()}).view({3, 4})); },
       {.gradcheck = true, .gpu = floats}},
      {"pin_memory", [](DType d) { return TensorList{uniform({2, 3}, 65, d)}; },
       [](L x) { return one(x[0].pin_memory() * ts::arange(6, {.dtype = DType::f64}).view({2, 3})); },
       {.gradcheck = true}},
      {"to dtype, through float32 (gradient through the float64 path only)", [](DType d) { return TensorList{uniform({3}, 66, d)}; },
       [](L x) { return one(x[0].to(DType::f32).to(DType::f64) * 0.0 + x[0] * 2.0); },
       {.gradcheck = true}},
      // Through pinned host memory and back: direct DMA both ways on a GPU.
      {"pin_memory round trip", [](DType d) { return TensorList{uniform({3, 4}, 198, d)}; },
       [](L x) { return one(x[0].cpu().pin_memory().to(x[0].device()) * 2.0); },
       {.gpu = floats}},
      {"to dtype", [](DType d) { return TensorList{uniform({3, 7}, 98, d)}; },
       [](L x) {
         Tensor other = x[0].to(x[0].dtype() == DType::f32 ? DType::f64 : DType::f32);
         return TensorList{other.to(x[0].dtype()) * 2.0 + x[0], x[0].detach().to(DType::bf16), x[0].detach().to(DType::i64)};
       },
       {.gpu = floats}},
      {"to another device and back", [](DType d) { return TensorList{uniform({3, 4}, 99, d)}; },
       [](L x) { return one((x[0].to(ts::Device::cpu()) * 3.0).to(x[0].device())); },
       {.gpu = floats}},
      {"cat stack", [](DType d) { return TensorList{uniform({2, 3}, 67, d), uniform({1, 3}, 68, d)}; },
       [](L x) {
         return one(ts::stack({ts::cat({x[0], x[1]}, 0), ts::cat({x[1], x[0]}, 0)}, 1) * ts::arange(18, {.dtype = x[0].dtype(), .device = x[0].device()}).view({3, 2, 3}));
       },
       {.gradcheck = true, .gpu = floats}},
      // ---- Masks, indexing, selection and scans (index tensors made on the inputs' device) ----
      {"masked_fill, broadcast mask", [](DType d) { return TensorList{uniform({4, 5, 6}, 140, d)}; },
       [](L x) {
         Tensor mask = every_nth({5, 6}, 4).to(x[0].device());
         return TensorList{x[0].masked_fill(mask, -1e9), ts::masked_fill(x[0].narrow(2, 0, 1), mask, 0.5)};
       },
       {.gpu = floats}},
      {"masked_fill and tril on int64 and bool",
       [](DType d) { return TensorList{small_integers({6, 6}, 141, d)}; },
       [](L x) {
         Tensor mask = x[0] > 0.0;
         return TensorList{x[0].masked_fill(mask, 7), mask.masked_fill(~mask, 1), mask.tril(1), x[0].triu(-1),
                           ts::ones({5, 5}, {.dtype = DType::boolean, .device = x[0].device()}).tril()};
       },
       {.gpu = {i64}}},
      {"tril triu, batched, non-contiguous", [](DType d) { return TensorList{uniform({3, 6, 7}, 142, d, -1, 1, true)}; },
       [](L x) { return one(x[0].tril(1) * 2.0 + x[0].triu(-2) + ts::tril(x[0], -9)); },
       {.gradcheck = true, .gpu = floats}},
      {"split and chunk, unused pieces", [](DType d) { return TensorList{uniform({6, 10}, 143, d)}; },
       [](L x) {
         std::vector<Tensor> p = x[0].split(std::vector<int64_t>{2, 3, 5}, 1);
         std::vector<Tensor> c = x[0].chunk(4, 0);
         return TensorList{p[0] * p[1].sum({1}, true) + c[2].narrow(1, 0, 2).sum(), p[2], c[1]};
       },
       {.gpu = floats}},
      {"index_select, repeated indices, two dims", [](DType d) { return TensorList{uniform({6, 5, 4}, 144, d)}; },
       [](L x) {
         Tensor rows = labels({5, 0, 5, 2}).to(x[0].device()), cols = labels({4, 4, 1}).to(x[0].device());
         return one(x[0].index_select(0, rows).index_select(1, cols) * 3.0);
       },
       {.gpu = floats}},
      {"index_select many rows (index_add_ by column)", [](DType d) { return TensorList{uniform({100, 64}, 145, d)}; },
       [](L x) {
         ts::Generator gen(146);
         return one(x[0].index_select(0, ts::randint(0, 100, {5000}, gen).to(x[0].device())));
       },
       {.gpu = floats}},
      {"gather and scatter_add, repeated indices",
       [](DType d) { return TensorList{uniform({4, 7}, 147, d), uniform({4, 5}, 148, d, -1, 1, true), uniform({3, 9}, 149, d)}; },
       [](L x) {
         ts::Generator gen(150);
         Tensor pick = ts::randint(0, 7, {4, 9}, gen).to(x[0].device());
         Tensor place = ts::randint(0, 4, {3, 5}, gen).to(x[0].device());
         Tensor rows = ts::randint(0, 5, {3, 4}, gen).to(x[0].device());
         return TensorList{x[0].gather(1, pick) * x[2].narrow(0, 0, 1) + x[1].scatter_add(0, place, x[2].narrow(1, 0, 5)).sum(),
                           ts::gather(x[1].t(), 0, rows)};
       },
       {.gpu = floats}},
      {"native index_add_ and scatter_add_ on int64",
       [](DType d) { return TensorList{small_integers({5, 4}, 151, d), small_integers({3, 4}, 152, d)}; },
       [](L x) {
         Tensor into = x[0].clone();
         native::index_add_(into, 0, labels({4, 0, 4}).to(x[0].device()), x[1]);
         Tensor scattered = x[0].clone();
         native::scatter_add_(scattered, 1, labels({3, 3, 0, 1, 2, 2, 2, 2, 1, 0, 0, 0}, {3, 4}).to(x[0].device()), x[1]);
         return TensorList{into, scattered};
       },
       {.gpu = {i64}}},
      {"topk: largest, smallest, every dim", [](DType d) { return TensorList{uniform({7, 33}, 153, d, -1, 1, true)}; },
       [](L x) {
         auto [values, indices] = x[0].topk(5, 1);
         auto [low, low_indices] = ts::topk(x[0], 3, 0, /*largest=*/false);
         return TensorList{values + low.sum(), indices, low_indices, std::get<0>(x[0].topk(33, 1))};
       },
       {.gpu = floats}},
      {"topk: ties and NaNs by position, long rows",
       [](DType d) { return TensorList{ties_and_nans(50, d), uniform({2, 50000}, 154, d)}; },
       [](L x) {
         auto [values, indices] = x[0].topk(12, 1);
         auto [low, low_indices] = x[0].topk(7, 1, false);
         auto [long_values, long_indices] = x[1].detach().topk(100, -1);
         return TensorList{values, indices, low, low_indices, long_values, long_indices};
       },
       {.gpu = floats}},
      {"topk on integers: ties by position",
       [](DType d) { return TensorList{small_integers({6, 40}, 155, d, 0, 5)}; },
       [](L x) {
         auto [values, indices] = x[0].topk(10, 1);
         auto [low, low_indices] = x[0].topk(4, 0, false);
         return TensorList{values, indices, low, low_indices};
       },
       {.gpu = {i64, u8}}},
      {"cumsum, both directions", [](DType d) { return TensorList{uniform({5, 300}, 156, d, -1, 1, true)}; },
       [](L x) {
         return TensorList{x[0].cumsum(1) + ts::cumsum(x[0], 0), native::cumsum(x[0].detach(), 1, /*reverse=*/true)};
       },
       {.gpu = floats}},
      {"cumsum on integers and bool",
       [](DType d) { return TensorList{small_integers({4, 50}, 157, d, 0, 9)}; },
       [](L x) { return TensorList{x[0].cumsum(1), x[0].cumsum(0), (x[0] > 4.0).cumsum(1)}; },
       {.gpu = {i64, u8}}},
      {"searchsorted (native)",
       [](DType d) { return TensorList{uniform({3, 40}, 158, d, 0.1, 1), uniform({3, 25}, 159, d, 0, 30)}; },
       [](L x) {
         Tensor sorted = x[0].detach().cumsum(1);
         return TensorList{native::searchsorted(sorted, x[1].detach(), false), native::searchsorted(sorted, x[1].detach(), true),
                           native::searchsorted(sorted.select(0, 0), x[1].detach(), true)};
       },
       {.gpu = floats}},
      {"multinomial: the device draws the CPU's indices",
       [](DType d) { return TensorList{uniform({4, 30}, 160, d, 0, 1)}; },
       [](L x) {
         Tensor probs = x[0].detach().masked_fill(x[0].detach() < 0.2, 0.0);
         ts::Generator with(161), without(161);
         return TensorList{ts::multinomial(probs, 500, /*replacement=*/true, with),
                           ts::multinomial(probs, 10, /*replacement=*/false, without)};
       },
       {.gpu = floats}},
      // Repeated indices make the backward adds add.
      {"masked_fill, mask broadcast to x", [](DType d) { return TensorList{uniform({2, 3, 4}, 78, d)}; },
       [](L x) { return one(x[0].masked_fill(ts::tensor<bool>({true, false, false, true}, {1, 1, 4}), -2.5) * 3.0); },
       {.gradcheck = true}},
      {"masked_fill, x broadcast to the mask", [](DType d) { return TensorList{uniform({3, 1}, 79, d)}; },
       [](L x) { return one(ts::masked_fill(x[0], ts::arange(12).view({4, 3, 1}) > ts::full({}, 5, {.dtype = DType::i64}), 0.5)); },
       {.gradcheck = true}},
      {"tril triu of 4x5 matrices, batched, non-contiguous", [](DType d) { return TensorList{uniform({2, 4, 5}, 80, d, -1, 1, true)}; },
       [](L x) { return one(x[0].tril(1) * 2.0 + x[0].triu(-1) + ts::tril(x[0], -3)); },
       {.gradcheck = true, .gpu = floats}},
      {"split by sizes and chunk, unused pieces", [](DType d) { return TensorList{uniform({5, 6}, 81, d)}; },
       [](L x) {
         std::vector<Tensor> p = x[0].split(std::vector<int64_t>{1, 2, 3}, 1);
         std::vector<Tensor> c = ts::chunk(x[0], 3, 0);
         return one(p[0] * p[2] + c[1].sum() + p[1].sum({1}, true));
       },
       {.gradcheck = true}},
      {"split by size, last piece shorter", [](DType d) { return TensorList{uniform({7, 3}, 82, d, -1, 1, true)}; },
       [](L x) { return one(ts::split(x[0], 3, 0)[2] * 3.0); },
       {.gradcheck = true}},
      {"index_select, repeated indices", [](DType d) { return TensorList{uniform({4, 5, 3}, 83, d)}; },
       [](L x) { return one(x[0].index_select(1, labels({4, 0, 4, 2}))); },
       {.gradcheck = true}},
      {"index_select dim 0, non-contiguous", [](DType d) { return TensorList{uniform({5, 4}, 84, d, -1, 1, true)}; },
       [](L x) { return one(ts::index_select(x[0], 0, labels({3, 3, 1}))); },
       {.gradcheck = true}},
      {"gather dim 1, repeated indices", [](DType d) { return TensorList{uniform({3, 5}, 85, d)}; },
       [](L x) { return one(x[0].gather(1, ts::tensor<int64_t>({0, 4, 4, 1, 1, 2, 3, 0, 0}, {3, 3}))); },
       {.gradcheck = true}},
      {"gather dim 0, index smaller than x", [](DType d) { return TensorList{uniform({4, 3, 2}, 86, d, -1, 1, true)}; },
       [](L x) { return one(ts::gather(x[0], 0, ts::tensor<int64_t>({3, 0, 1, 1, 2, 2, 0, 3}, {2, 2, 2}))); },
       {.gradcheck = true}},
      {"scatter_add, src wider than index", [](DType d) { return TensorList{uniform({3, 5}, 87, d), uniform({3, 4}, 88, d)}; },
       [](L x) { return one(x[0].scatter_add(1, ts::tensor<int64_t>({0, 4, 0, 2, 2, 2, 1, 3, 4}, {3, 3}), x[1])); },
       {.gradcheck = true}},
      {"topk largest", [](DType d) { return TensorList{uniform({3, 6}, 89, d)}; },
       [](L x) { return one(std::get<0>(x[0].topk(3, 1))); },
       {.gradcheck = true}},
      {"topk smallest along dim 0, non-contiguous", [](DType d) { return TensorList{uniform({5, 4}, 90, d, -1, 1, true)}; },
       [](L x) { return one(std::get<0>(ts::topk(x[0], 2, 0, /*largest=*/false))); },
       {.gradcheck = true}},
      {"cumsum", [](DType d) { return TensorList{uniform({3, 4, 2}, 91, d)}; }, [](L x) { return one(x[0].cumsum(1)); },
       {.gradcheck = true}},
      {"cumsum last dim, non-contiguous", [](DType d) { return TensorList{uniform({3, 5}, 92, d, -1, 1, true)}; },
       [](L x) { return one(ts::cumsum(x[0], -1)); },
       {.gradcheck = true}},
      {"softmax and log_softmax over every dim, non-contiguous",
       [](DType d) { return TensorList{uniform({3, 4, 5}, 162, d, -3, 3, true)}; },
       [](L x) {
         return TensorList{x[0].softmax(0) + x[0].log_softmax(1) + ts::softmax(x[0], -1) * x[0].log_softmax(-2)};
       },
       {.gpu = floats}},
      {"nll_loss [N, C, d1, d2], weighted, ignore_index", [](DType d) { return TensorList{uniform({3, 5, 2, 4}, 163, d)}; },
       [](L x) {
         ts::Generator gen(164);
         Tensor target = ts::randint(0, 5, {3, 2, 4}, gen).masked_fill(every_nth({2, 4}, 3), -100);
         Tensor weight = constant({0.2, 1.0, 3.0, 0.5, 1.5}, {5}, x[0].dtype()).to(x[0].device());
         target = target.to(x[0].device());
         return TensorList{ts::nll_loss(x[0], target, {.weight = weight}),
                           ts::nll_loss(x[0].detach(), target, {.reduction = ts::Reduction::none})};
       },
       {.gpu = floats}},
      {"cross_entropy label smoothing [N, C, d], weights, ignore_index",
       [](DType d) { return TensorList{uniform({4, 6, 3}, 165, d, -2, 2)}; },
       [](L x) {
         Tensor target = labels({0, 5, 1, 1, 2, 3, 4, 1, 0, 5, 5, 2}, {4, 3}).to(x[0].device());
         Tensor weight = constant({0.5, 1.0, 2.0, 1.5, 0.7, 1.1}, {6}, x[0].dtype()).to(x[0].device());
         return TensorList{ts::cross_entropy(x[0], target, {.weight = weight, .ignore_index = 1, .label_smoothing = 0.2}),
                           ts::cross_entropy(x[0].detach(), target, {.reduction = ts::Reduction::none, .label_smoothing = 0.1})};
       },
       {.gpu = floats}},
      // softmax and log_softmax over every dim, contiguous or not.
      {"softmax dim 0 and last of a 3-D tensor", [](DType d) { return TensorList{uniform({3, 4, 2}, 93, d, -2, 2)}; },
       [](L x) { return one(x[0].softmax(0) + ts::softmax(x[0], -1) * 2.0); },
       {.gradcheck = true}},
      {"log_softmax middle dim, non-contiguous", [](DType d) { return TensorList{uniform({2, 5, 3}, 94, d, -2, 2, true)}; },
       [](L x) { return one(x[0].log_softmax(1) + ts::log_softmax(x[0], -2)); },
       {.gradcheck = true}},
      // Losses on [N, C, d1, ...], ignore_index and label smoothing.
      {"nll_loss [N, C, d1, d2] weighted, ignore_index", [](DType d) { return TensorList{uniform({2, 3, 2, 2}, 95, d)}; },
       [](L x) {
         return one(ts::nll_loss(x[0], ts::tensor<int64_t>({0, 2, -100, 1, 1, 1, 2, -100}, {2, 2, 2}),
                             {.weight = ts::tensor<double>({0.2, 1.0, 3.0})}));
       },
       {.gradcheck = true}},
      {"nll_loss [N, C, d] none", [](DType d) { return TensorList{uniform({2, 4, 3}, 96, d)}; },
       [](L x) {
         return one(ts::nll_loss(x[0], ts::tensor<int64_t>({3, 0, 1, 2, 2, 0}, {2, 3}), {.reduction = ts::Reduction::none}));
       },
       {.gradcheck = true}},
      {"cross_entropy label smoothing, weighted, ignore_index, [N, C, d]", [](DType d) { return TensorList{uniform({3, 4, 2}, 97, d, -2, 2)}; },
       [](L x) {
         return one(ts::cross_entropy(x[0], ts::tensor<int64_t>({0, 3, 1, 1, 2, 1}, {3, 2}),
                                  {.weight = ts::tensor<double>({0.5, 1.0, 2.0, 1.5}), .ignore_index = 1,
                                   .label_smoothing = 0.2}));
       },
       {.gradcheck = true}},
      {"cross_entropy label smoothing, sum and none", [](DType d) { return TensorList{uniform({5, 3}, 98, d, -2, 2)}; },
       [](L x) {
         Tensor t = labels({0, 2, -100, 1, 2});
         return one(ts::cross_entropy(x[0], t, {.reduction = ts::Reduction::sum, .label_smoothing = 0.1}) +
                ts::cross_entropy(x[0], t, {.reduction = ts::Reduction::none, .label_smoothing = 0.3}));
       },
       {.gradcheck = true}},
      {"cross_entropy of one score vector [C], label smoothing", [](DType d) { return TensorList{uniform({5}, 99, d, -2, 2)}; },
       [](L x) { return one(ts::cross_entropy(x[0], ts::full({}, 3, {.dtype = DType::i64}), {.label_smoothing = 0.25})); },
       {.gradcheck = true}},
      // ---- Attention (the CPU's blocked kernel against CUDA's GEMMs and row kernels) ----
      {"attention, boolean mask with an empty row",
       [](DType d) { return TensorList{uniform({2, 3, 7, 8}, 120, d), uniform({2, 3, 9, 8}, 121, d), uniform({2, 3, 9, 5}, 122, d)}; },
       [](L x) {
         Tensor keep = ts::gt(uniform({7, 9}, 123, f64, -0.5, 1).detach(), ts::zeros({}, {.dtype = f64}));
         keep.narrow(0, 2, 1).zero_();
         return one(ts::scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = keep.to(x[0].device())}));
       },
       {.gpu = floats}},
      {"attention causal from [B, T, H, D], dropout",
       [](DType d) { return TensorList{uniform({2, 33, 3, 16}, 124, d), uniform({2, 33, 3, 16}, 125, d), uniform({2, 33, 3, 16}, 126, d)}; },
       [](L x) {
         return one(ts::scaled_dot_product_attention(x[0].transpose(1, 2), x[1].transpose(1, 2), x[2].transpose(1, 2),
                                                     {.dropout_p = 0.2, .is_causal = true, .dropout_key = {.seed = 5, .step = 9, .first_row = 3}}));
       },
       {.gpu = floats}},
      {"attention float mask, several CPU tiles, lse",
       [](DType d) { return TensorList{uniform({1, 2, 130, 32}, 127, d), uniform({1, 2, 300, 32}, 128, d), uniform({1, 2, 300, 24}, 129, d), uniform({2, 1, 130, 300}, 130, d).detach()}; },
       [](L x) {
         auto [out, lse] = native::scaled_dot_product_attention(x[0].detach(), x[1].detach(), x[2].detach(),
                                                                {.attn_mask = x[3].select(0, 0), .scale = 0.3});
         return TensorList{ts::scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = x[3].select(0, 1), .scale = 0.3}), out, lse};
       },
       {.gpu = floats}},
      // Attention: the blocked kernel (float64), then the unblocked path a mask with a gradient takes.
      {"scaled_dot_product_attention", [](DType d) { return TensorList{uniform({2, 2, 4, 3}, 80, d), uniform({2, 2, 5, 3}, 81, d), uniform({2, 2, 5, 2}, 82, d)}; },
       [](L x) { return one(ts::scaled_dot_product_attention(x[0], x[1], x[2], {.scale = 0.7})); },
       {.gradcheck = true}},
      {"scaled_dot_product_attention causal, from [B, T, H, D]",
       [](DType d) { return TensorList{uniform({1, 5, 2, 3}, 83, d, -2, 2), uniform({1, 4, 2, 3}, 84, d, -2, 2), uniform({1, 4, 2, 3}, 85, d)}; },
       [](L x) {
         return one(ts::scaled_dot_product_attention(x[0].transpose(1, 2), x[1].transpose(1, 2), x[2].transpose(1, 2),
                                                 {.is_causal = true}));
       },
       {.gradcheck = true}},
      {"scaled_dot_product_attention boolean mask with an empty row, dropout",
       [](DType d) { return TensorList{uniform({2, 4, 3}, 86, d), uniform({2, 5, 3}, 87, d), uniform({2, 5, 3}, 88, d)}; },
       [](L x) {
         const Tensor keep = ts::gt(ts::tensor<double>({1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 1, 0, 1, 1}, {4, 5}),
                                    ts::zeros({}, {.dtype = DType::f64}));
         return one(ts::scaled_dot_product_attention(x[0], x[1], x[2],
                                                 {.attn_mask = keep, .dropout_p = 0.3, .dropout_key = {.seed = 4, .step = 2}}));
       },
       {.gradcheck = true}},
      {"scaled_dot_product_attention learned float mask (unblocked)",
       [](DType d) { return TensorList{uniform({2, 3, 2}, 89, d), uniform({2, 4, 2}, 90, d), uniform({2, 4, 2}, 91, d), uniform({3, 4}, 92, d)}; },
       [](L x) { return one(ts::scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = x[3]})); },
       {.gradcheck = true}},
      // ---- Spatial ops and einsum: composites (no nodes of their own), checked end to end ----
      {"einsum batched matmul, non-contiguous", [](DType d) { return TensorList{uniform({2, 3, 4}, 290, d, -1, 1, true), uniform({2, 4, 2}, 291, d)}; },
       [](L x) { return one(ts::einsum("bij,bjk->bik", {x[0], x[1]})); },
       {.gradcheck = true}},
      {"einsum diagonal, trace, transpose", [](DType d) { return TensorList{uniform({3, 3}, 292, d, -1, 1, true)}; },
       [](L x) { return one(ts::einsum("ii->i", {x[0]}) * 2.0 + ts::einsum("ii", {x[0]}) + ts::einsum("ij->ji", {x[0]})); },
       {.gradcheck = true}},
      {"einsum three operands with an ellipsis", [](DType d) { return TensorList{uniform({2, 3, 4}, 293, d), uniform({4, 5}, 294, d), uniform({5}, 295, d)}; },
       [](L x) { return one(ts::einsum("...ij,jk,k->...i", {x[0], x[1], x[2]})); },
       {.gradcheck = true}},
      {"einsum size-1 broadcast, letters of one operand summed", [](DType d) { return TensorList{uniform({3, 1}, 296, d), uniform({2, 4}, 297, d)}; },
       [](L x) { return one(ts::einsum("ij,kj->i", {x[0], x[1]})); },
       {.gradcheck = true}},
      {"pad constant with a crop, non-contiguous", [](DType d) { return TensorList{uniform({2, 3, 4}, 298, d, -1, 1, true)}; },
       [](L x) { return one(ts::pad(x[0], {1, -1, 2, 0}, "constant", 0.5)); },
       {.gradcheck = true}},
      {"pad reflect, replicate, circular", [](DType d) { return TensorList{uniform({1, 2, 4, 5}, 299, d, -1, 1, true)}; },
       [](L x) {
         return one(ts::pad(x[0], {2, 1, 1, 2}, "reflect") + ts::pad(x[0], {2, 1, 1, 2}, "replicate") * 2.0 +
                ts::pad(x[0], {2, 1, 1, 2}, "circular") * 3.0);
       },
       {.gradcheck = true}},
      {"unfold with dilation, padding, stride, non-contiguous", [](DType d) { return TensorList{uniform({1, 2, 5, 6}, 300, d, -1, 1, true)}; },
       [](L x) { return one(ts::unfold(x[0], {2, 3}, {1, 2}, 1, {2, 1})); },
       {.gradcheck = true}},
      {"fold overlapping, padded", [](DType d) { return TensorList{uniform({1, 8, 9}, 301, d, -1, 1, true)}; },
       [](L x) { return one(ts::fold(x[0], {4, 5}, 2, 1, 1, 2)); },
       {.gradcheck = true}},
      {"interpolate nearest and nearest-exact", [](DType d) { return TensorList{uniform({1, 2, 3, 4}, 302, d, -1, 1, true)}; },
       [](L x) {
         return one(ts::interpolate(x[0], {.size = {5, 7}}) + ts::interpolate(x[0], {.size = {5, 7}, .mode = "nearest-exact"}));
       },
       {.gradcheck = true}},
      {"interpolate bilinear, both align_corners", [](DType d) { return TensorList{uniform({1, 2, 3, 4}, 303, d, -1, 1, true)}; },
       [](L x) {
         return one(ts::interpolate(x[0], {.size = {5, 6}, .mode = "bilinear"}) +
                ts::interpolate(x[0], {.size = {5, 6}, .mode = "bilinear", .align_corners = true}));
       },
       {.gradcheck = true}},
      {"interpolate linear down, trilinear up", [](DType d) { return TensorList{uniform({2, 2, 5}, 304, d), uniform({1, 1, 2, 3, 2}, 305, d)}; },
       [](L x) {
         return one(ts::interpolate(x[0], {.size = {3}, .mode = "linear"}).sum() +
                ts::interpolate(x[1], {.scale_factor = {1.5}, .mode = "trilinear"}).sum() * 0.5 +
                ts::interpolate(x[1], {.size = {3, 4, 3}, .mode = "trilinear", .align_corners = true}).pow(2.0).sum());
       },
       {.gradcheck = true}},
      // ---- bfloat16 where the CUDA backend has it ----
      {"bfloat16 element-wise",
       [](DType d) { return TensorList{uniform({37, 41}, 110, d), uniform({41}, 111, d, 0.5, 2)}; },
       [](L x) {
         return TensorList{ts::relu(x[0] * x[1] + x[0]) + ts::sigmoid(x[0]) * ts::tanh(x[1]) - x[0].exp() / x[1],
                           ts::maximum(x[0], x[1]), ts::lt(x[0], x[1])};
       },
       {.gpu = {bf16}}},
      {"bfloat16 sum", [](DType d) { return TensorList{uniform({6, 5000}, 112, d)}; },
       [](L x) { return TensorList{x[0].sum({1}), x[0].mean(), x[0].amax({0})}; },
       {.gpu = {bf16}}},
      {"bfloat16 matmul and linear",
       [](DType d) { return TensorList{uniform({2, 24, 40}, 113, d), uniform({40, 16}, 114, d), uniform({16}, 115, d)}; },
       [](L x) { return one(ts::matmul(x[0], x[1]) + ts::linear(x[0], x[1].t(), x[2])); },
       {.gpu = {bf16}}},
      {"bfloat16 conv2d",
       [](DType d) { return TensorList{uniform({2, 4, 10, 10}, 116, d), uniform({8, 4, 3, 3}, 117, d, -0.3, 0.3), uniform({8}, 118, d)}; },
       [](L x) { return one(ts::conv2d(x[0], x[1], x[2], {.stride = 1, .padding = 1})); },
       {.gpu = {bf16}}},
      // What GPT-2 runs under --mixed-precision bf16, a row each. Every op here rounds its
      // result to bfloat16 once (relative step 2^-8, about 2e-3 on average), from float32
      // arithmetic inside; attention's backward also rounds what feeds its next GEMM (Pd and
      // dS) and the gradients chain three or four such roundings: well under the 2e-2 of
      // gpu_test::tolerance. The reference is float32 on the CPU, on the same rounded inputs.
      {"bfloat16 layer_norm",
       [](DType d) { return TensorList{uniform({6, 96}, 139, d, -2, 2), uniform({96}, 140, d, 0.5, 1.5), uniform({96}, 141, d)}; },
       [](L x) { return one(ts::layer_norm(x[0], {96}, x[1], x[2])); },
       {.gpu = {bf16}}},
      {"bfloat16 gelu, exact and tanh", [](DType d) { return TensorList{uniform({7, 50}, 166, d, -3, 3)}; },
       [](L x) { return one(ts::gelu(x[0], "tanh") + ts::gelu(x[0])); },
       {.gpu = {bf16}}},
      {"bfloat16 embedding (GPT-2's wte + wpe)",
       [](DType d) { return TensorList{uniform({11, 24}, 142, d), uniform({8, 24}, 167, d)}; },
       [](L x) {
         Tensor ids = labels({3, 0, 10, 3, 7, 7, 1, 2, 9, 0, 5, 3}, {2, 6}).to(x[0].device());
         Tensor positions = labels({0, 1, 2, 3, 4, 5}).to(x[0].device());
         return one(ts::embedding(ids, x[0]) + ts::embedding(positions, x[1]));
       },
       {.gpu = {bf16}}},
      {"bfloat16 softmax and log_softmax", [](DType d) { return TensorList{uniform({5, 4, 33}, 168, d, -4, 4)}; },
       [](L x) { return one(x[0].softmax(-1) + x[0].log_softmax(1) * 0.25); },
       {.gpu = {bf16}}},
      {"bfloat16 cross_entropy (fused) and nll_loss",
       [](DType d) { return TensorList{uniform({12, 50}, 169, d, -3, 3), uniform({6, 7}, 170, d, -3, 3)}; },
       [](L x) {
         ts::Generator gen(171);
         Tensor targets = ts::randint(0, 50, {12}, gen).to(x[0].device());
         Tensor classes = labels({6, 0, 3, 3, 1, 2}).to(x[0].device());
         return TensorList{ts::cross_entropy(x[0], targets) + ts::nll_loss(x[1].log_softmax(1), classes),
                           ts::cross_entropy(x[0].detach(), targets, {.reduction = ts::Reduction::none})};
       },
       {.gpu = {bf16}}},
      {"bfloat16 attention causal from [B, T, H, D], dropout (GPT-2's)",
       [](DType d) { return TensorList{uniform({2, 33, 3, 16}, 124, d), uniform({2, 33, 3, 16}, 125, d), uniform({2, 33, 3, 16}, 126, d)}; },
       [](L x) {
         return one(ts::scaled_dot_product_attention(x[0].transpose(1, 2), x[1].transpose(1, 2), x[2].transpose(1, 2),
                                                     {.dropout_p = 0.2, .is_causal = true, .dropout_key = {.seed = 5, .step = 9, .first_row = 3}}));
       },
       {.gpu = {bf16}}},
      {"bfloat16 attention, boolean mask (the KV cache's) and float mask",
       [](DType d) { return TensorList{uniform({2, 2, 7, 8}, 172, d), uniform({2, 2, 9, 8}, 173, d), uniform({2, 2, 9, 5}, 174, d), uniform({7, 9}, 175, d).detach()}; },
       [](L x) {
         Tensor keep = ts::gt(uniform({7, 9}, 176, f64, -0.5, 1).detach(), ts::zeros({}, {.dtype = f64}));
         keep.narrow(0, 2, 1).zero_();  // a row with no key: output 0
         return TensorList{ts::scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = keep.to(x[0].device())}) +
                               ts::scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = x[3], .scale = 0.3})};
       },
       {.gpu = {bf16}}},
      {"bfloat16 dropout and pooling (forward)", [](DType d) { return TensorList{uniform({2, 3, 8, 8}, 119, d)}; },
       [](L x) {
         auto [pooled, indices] = native::max_pool2d(x[0].detach(), {});
         auto [dropped, mask] = native::dropout(x[0].detach(), 0.25, {.seed = 3});
         return TensorList{pooled, indices, dropped, mask};
       },
       {.gpu = {bf16}}},
  };
}

}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> made = make_op_cases();
    for (size_t i = 0; i < made.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (made[i].name == made[j].name) throw std::logic_error("op_cases: two samples named \"" + made[i].name + "\"");
      }
    }
    return made;
  }();
  return cases;
}

const OpCase& op_case(std::string_view name) {
  for (const OpCase& c : op_cases()) {
    if (c.name == name) return c;
  }
  throw std::out_of_range("op_cases: no sample named \"" + std::string(name) + "\"");
}

}  // namespace op_cases
