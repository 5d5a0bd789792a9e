// Layer normalisation on the CPU, computed as PyTorch 1.13's CPU kernel computes it, so
// that float32 and float64 results match torch.nn.functional.layer_norm bit for bit
// (tests/golden/test_layers_golden.cpp checks it on PyTorch's outputs).
//
// PyTorch's x86 build runs its CPU kernels with AVX2 vectors: 8 float or 4 double lanes
// (Vectorized<T>::size()). The same computation is written here with arrays of that many
// lanes, which the compiler vectorises; no intrinsics, so the file builds for any target.
//  - Moments (PyTorch's RowwiseMoments): per lane, Welford's update over chunks of 16
//    vectors; the chunks' (count, mean, m2) merge in a cascade (a binary counter of
//    partial results: pairwise summation), then the lanes merge into the Welford result of
//    the scalar tail. var = m2 / N (biased); rstd = 1 / sqrt(var + eps), eps in T.
//  - Forward: y = fma(fma(x, rstd, -rstd * mean), weight, bias). PyTorch's build (GCC,
//    -ffp-contract=fast) fused both multiply-adds of (x * rstd + shift) * weight + bias.
//  - Backward, per row: ds = sum(dy * x * w) and db = sum(dy * w) in lane accumulators
//    (the first vector's products, then fused multiply-adds), the lanes summed as
//    vec_reduce_all does (float: a halving tree; double: in lane order); then
//      b = (db * mean - ds) * rstd^3 / N,  c = -b * mean - db * rstd / N,
//      dx = fma(b, x, rstd * dy * w) + c.
//    dweight[j] = fma(dy, fma(rstd, x, -rstd * mean), dweight[j]) and dbias[j] += dy over
//    the rows in order: PyTorch's result with one thread. Here threads split the columns,
//    so the sums do not depend on the thread count (PyTorch's do).
// This file is compiled with -ffp-contract=off (src/tensor/meson.build): its only fused
// multiply-adds are the std::fma calls written here.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/kernel_shapes.h"
#include "tessera/tensor/layer_kernel_shapes.h"

namespace tessera::cpu {

using namespace native;

namespace {

// PyTorch's AVX2 vector width for T.
template <class T>
inline constexpr int64_t kLanes = 32 / static_cast<int64_t>(sizeof(T));
// Vectors per Welford chunk (PyTorch's kChunkSize).
constexpr int64_t kChunk = 16;

// PyTorch's utils::CeilLog2: 1 for x <= 2.
int ceil_log2(int64_t x) { return x <= 2 ? 1 : std::bit_width(static_cast<uint64_t>(x - 1)); }

// Welford's merge of (count_add, mean_add, m2_add) into (count, mean, m2).
template <class T>
void add_moments(int64_t count_add, T mean_add, T m2_add, int64_t& count, T& mean, T& m2) {
  const int64_t n = count + count_add;
  const T c = n == 0 ? T(0) : static_cast<T>(count_add) / static_cast<T>(n);
  const T delta = mean_add - mean;
  mean += c * delta;
  m2 += m2_add + delta * delta * c * static_cast<T>(count);
  count = n;
}

// Per-lane moments: every lane has seen `count` elements. Trivial, so that the cascade's
// stack costs nothing until reset().
template <class T>
struct LaneMoments {
  int64_t count;
  T mean[kLanes<T>];
  T m2[kLanes<T>];

  void reset() {
    count = 0;
    std::fill(std::begin(mean), std::end(mean), T(0));
    std::fill(std::begin(m2), std::end(m2), T(0));
  }

  void add(const LaneMoments& other) {
    const int64_t n = count + other.count;
    const T c = n == 0 ? T(0) : static_cast<T>(other.count) / static_cast<T>(n);
    const T previous = static_cast<T>(count);
    for (int64_t l = 0; l < kLanes<T>; ++l) {
      const T delta = other.mean[l] - mean[l];
      mean[l] += c * delta;
      m2[l] += other.m2[l] + delta * delta * c * previous;
    }
    count = n;
  }
};

// (mean, biased variance) of x[0, n), as PyTorch's RowwiseMoments.
template <class T>
std::pair<T, T> row_moments(const T* x, int64_t n) {
  constexpr int64_t L = kLanes<T>;
  const int64_t vectors = n / L;
  const int64_t chunks = (vectors + kChunk - 1) / kChunk;
  const int depth = ceil_log2(chunks);
  static const auto reciprocals = [] {
    std::array<T, kChunk> r{};
    for (int64_t j = 0; j < kChunk; ++j) r[j] = T(1) / static_cast<T>(j + 1);
    return r;
  }();

  LaneMoments<T> stack[64];  // depth <= 64 for any int64 n
  for (int level = 0; level < depth; ++level) stack[level].reset();
  for (int64_t i = 0; i < chunks; ++i) {
    const T* chunk = x + i * kChunk * L;
    LaneMoments<T> part;
    part.reset();
    part.count = std::min(kChunk, vectors - i * kChunk);
    for (int64_t j = 0; j < part.count; ++j) {
      const T* v = chunk + j * L;
      for (int64_t l = 0; l < L; ++l) {
        const T delta = v[l] - part.mean[l];
        part.mean[l] += delta * reciprocals[j];
        part.m2[l] += delta * (v[l] - part.mean[l]);
      }
    }
    stack[0].add(part);
    for (int64_t level = 1, mask = i + 1; level < depth && (mask & 1) == 0; ++level, mask >>= 1) {
      stack[level].add(stack[level - 1]);
      stack[level - 1].reset();
    }
  }
  for (int level = 1; level < depth; ++level) stack[0].add(stack[level]);

  int64_t count = 0;
  T mean = 0, m2 = 0;
  for (int64_t i = vectors * L; i < n; ++i) {
    const T delta = x[i] - mean;
    ++count;
    mean += delta / static_cast<T>(count);
    m2 += delta * (x[i] - mean);
  }
  for (int64_t l = 0; l < L; ++l) add_moments(vectors, stack[0].mean[l], stack[0].m2[l], count, mean, m2);
  return {mean, m2 / static_cast<T>(n)};
}

// The sum of PyTorch's lane accumulators as vec_reduce_all adds them.
inline float reduce_lanes(const float (&acc)[8]) {
  const float s0 = acc[0] + acc[4], s1 = acc[1] + acc[5], s2 = acc[2] + acc[6], s3 = acc[3] + acc[7];
  return (s0 + s2) + (s1 + s3);
}
inline double reduce_lanes(const double (&acc)[4]) { return ((acc[0] + acc[1]) + acc[2]) + acc[3]; }

// sum_j p(j) * q(j) as PyTorch's map2_reduce_all(x * y, x + y) computes it after GCC fused
// the accumulation: the first vector's products, then acc = fma(p, q, acc) per lane;
// fewer elements than lanes are summed in order.
template <class T, class P, class Q>
T lane_dot(int64_t n, P p, Q q) {
  constexpr int64_t L = kLanes<T>;
  if (n < L) {
    T sum = n > 0 ? p(0) * q(0) : T(0);
    for (int64_t j = 1; j < n; ++j) sum = sum + p(j) * q(j);
    return sum;
  }
  T acc[L];
  for (int64_t l = 0; l < L; ++l) acc[l] = p(l) * q(l);
  int64_t d = L;
  for (; d < n - n % L; d += L) {
    for (int64_t l = 0; l < L; ++l) acc[l] = std::fma(p(d + l), q(d + l), acc[l]);
  }
  for (int64_t l = 0; d + l < n; ++l) acc[l] = std::fma(p(d + l), q(d + l), acc[l]);
  return reduce_lanes(acc);
}

// sum_j v[j] as PyTorch's reduce_all(x + y).
template <class T>
T lane_sum(const T* v, int64_t n) {
  constexpr int64_t L = kLanes<T>;
  if (n < L) {
    T sum = n > 0 ? v[0] : T(0);
    for (int64_t j = 1; j < n; ++j) sum = sum + v[j];
    return sum;
  }
  T acc[L];
  for (int64_t l = 0; l < L; ++l) acc[l] = v[l];
  int64_t d = L;
  for (; d < n - n % L; d += L) {
    for (int64_t l = 0; l < L; ++l) acc[l] = acc[l] + v[d + l];
  }
  for (int64_t l = 0; d + l < n; ++l) acc[l] = acc[l] + v[d + l];
  return reduce_lanes(acc);
}

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() && t.numel() > 0 ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

template <class T>
void normalize_row(const T* x, T* y, int64_t n, T mean, T rstd, const T* w, const T* b) {
  const T scale = rstd, shift = -rstd * mean;
  if (w != nullptr && b != nullptr) {
    for (int64_t j = 0; j < n; ++j) y[j] = std::fma(std::fma(x[j], scale, shift), w[j], b[j]);
  } else if (w != nullptr) {
    for (int64_t j = 0; j < n; ++j) y[j] = std::fma(x[j], scale, shift) * w[j];
  } else if (b != nullptr) {
    for (int64_t j = 0; j < n; ++j) y[j] = std::fma(x[j], scale, shift) + b[j];
  } else {
    for (int64_t j = 0; j < n; ++j) y[j] = std::fma(x[j], scale, shift);
  }
}

// dx of one row.
template <class T>
void input_gradient_row(const T* dy, const T* x, T* dx, int64_t n, T mean, T rstd, const T* w) {
  T ds, db;
  if (w != nullptr) {
    ds = lane_dot<T>(n, [&](int64_t j) { return dy[j] * x[j]; }, [&](int64_t j) { return w[j]; });
    db = lane_dot<T>(n, [&](int64_t j) { return dy[j]; }, [&](int64_t j) { return w[j]; });
  } else {
    ds = lane_dot<T>(n, [&](int64_t j) { return dy[j]; }, [&](int64_t j) { return x[j]; });
    db = lane_sum(dy, n);
  }
  const T a = rstd;
  const T scale = T(1) / static_cast<T>(n);
  const T b = std::fma(db, mean, -ds) * a * a * a * scale;
  const T c = std::fma(-b, mean, -(db * a * scale));
  if (w != nullptr) {
    for (int64_t j = 0; j < n; ++j) dx[j] = std::fma(b, x[j], a * dy[j] * w[j]) + c;
  } else {
    for (int64_t j = 0; j < n; ++j) dx[j] = std::fma(b, x[j], a * dy[j]) + c;
  }
}

// Columns per task of the weight and bias gradients: whole cache lines, and enough tasks
// for every thread.
constexpr int64_t kColumnBlock = 64;

}  // namespace

std::tuple<Tensor, Tensor, Tensor> layer_norm(const Tensor& input_in, const Shape& normalized_shape,
                                              const Tensor& weight_in, const Tensor& bias_in, double eps) {
  const char* op = "layer_norm";
  const LayerNormLayout layout = check_layer_norm_operands(input_in, normalized_shape, weight_in, bias_in, eps);
  check_cpu(input_in, op);
  const NormalizationTensors t = normalization_tensors(input_in, weight_in, bias_in, layout.rows, input_in.dtype());

  dispatch_floating(t.input.dtype(), op, [&]<class T>() {
    const T* x = data_or_null<T>(t.input);
    T* y = t.input.numel() > 0 ? t.output.data_ptr<T>() : nullptr;
    const T* w = data_or_null<T>(t.weight);
    const T* b = data_or_null<T>(t.bias);
    T* means = layout.rows > 0 ? t.mean.data_ptr<T>() : nullptr;
    T* rstds = layout.rows > 0 ? t.inverse_std.data_ptr<T>() : nullptr;
    const int64_t rows = layout.rows, cols = layout.cols;
    const T epsilon = static_cast<T>(eps);  // PyTorch adds eps in T

#pragma omp parallel for if (rows * cols > cpu::kParallelGrain)
    for (int64_t i = 0; i < rows; ++i) {
      const T* row = cols > 0 ? x + i * cols : nullptr;
      auto [row_mean, variance] = row_moments(row, cols);
      const T row_rstd = T(1) / std::sqrt(variance + epsilon);
      if (cols > 0) normalize_row(row, y + i * cols, cols, row_mean, row_rstd, w, b);
      means[i] = row_mean;
      rstds[i] = row_rstd;
    }
  });
  return {t.output, t.mean, t.inverse_std};
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& grad_output_in, const Tensor& input_in,
                                                       const Shape& normalized_shape, const Tensor& mean_in,
                                                       const Tensor& rstd_in, const Tensor& weight_in,
                                                       std::array<bool, 3> output_mask) {
  const char* op = "layer_norm_backward";
  const LayerNormLayout layout =
      check_layer_norm_backward_operands(grad_output_in, input_in, normalized_shape, mean_in, rstd_in, weight_in);
  check_cpu(grad_output_in, op);
  Tensor grad_output = contiguous(grad_output_in), input = contiguous(input_in);
  Tensor mean = contiguous(mean_in), rstd = contiguous(rstd_in);
  Tensor weight = contiguous_if_defined(weight_in);
  Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[0]) grad_input = empty(input.sizes(), input.dtype(), input.device());
  if (output_mask[1]) grad_weight = zeros(normalized_shape, input.dtype(), input.device());
  if (output_mask[2]) grad_bias = zeros(normalized_shape, input.dtype(), input.device());
  if (layout.rows == 0 || layout.cols == 0) return {grad_input, grad_weight, grad_bias};

  dispatch_floating(input.dtype(), op, [&]<class T>() {
    const T* x = input.data_ptr<T>();
    const T* dy = grad_output.data_ptr<T>();
    const T* means = mean.data_ptr<T>();
    const T* rstds = rstd.data_ptr<T>();
    const T* w = data_or_null<T>(weight);
    const int64_t rows = layout.rows, cols = layout.cols;
    const bool parallel = rows * cols > cpu::kParallelGrain;

    if (output_mask[0]) {
      T* dx = grad_input.data_ptr<T>();
#pragma omp parallel for if (parallel)
      for (int64_t i = 0; i < rows; ++i) {
        input_gradient_row(dy + i * cols, x + i * cols, dx + i * cols, cols, means[i], rstds[i], w);
      }
    }
    if (output_mask[1] || output_mask[2]) {
      T* dw = output_mask[1] ? grad_weight.data_ptr<T>() : nullptr;
      T* db = output_mask[2] ? grad_bias.data_ptr<T>() : nullptr;
      const int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (parallel)
      for (int64_t block = 0; block < blocks; ++block) {
        const int64_t begin = block * kColumnBlock, end = std::min(cols, begin + kColumnBlock);
        for (int64_t i = 0; i < rows; ++i) {
          const T* dy_row = dy + i * cols;
          if (dw != nullptr) {
            const T a = rstds[i], shift = -rstds[i] * means[i];
            const T* x_row = x + i * cols;
            for (int64_t j = begin; j < end; ++j) dw[j] = std::fma(dy_row[j], std::fma(a, x_row[j], shift), dw[j]);
          }
          if (db != nullptr) {
            for (int64_t j = begin; j < end; ++j) db[j] = db[j] + dy_row[j];
          }
        }
      }
    }
  });
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace tessera::cpu
