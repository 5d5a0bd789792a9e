// Layer normalisation on CUDA, with the CPU kernel's formulas (cpu/layer_norm.cpp) and
// its fused multiply-adds written out (this file is built with -fmad=false, so nvcc adds
// no others). Arithmetic in Compute<T>: float for float32 and bfloat16, double for float64;
// mean and rstd are saved in that type.
//
// Forward: a block per row (grid-stride over rows). Each thread runs Welford's update over
// its elements, then the block merges the threads' (count, mean, m2) in a fixed tree, so
// results repeat run to run; y = fma(fma(x, rstd, -rstd * mean), w, b).
// Backward: dx with a block per row (ds, db by block_sum, then the CPU's expressions);
// dweight and dbias in two deterministic passes: partial sums over fixed chunks of rows,
// each column's partials then added in chunk order. No atomics anywhere.
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/device_types.cuh"
#include "tessera/tensor/cuda/launch.cuh"
#include "tessera/tensor/cuda/kernels.h"
#include "tessera/tensor/kernel_shapes.h"
#include "tessera/tensor/layer_kernel_shapes.h"

namespace tessera::cuda {

using namespace native;

namespace {

__device__ __forceinline__ float fused(float a, float b, float c) { return ::fmaf(a, b, c); }
__device__ __forceinline__ double fused(double a, double b, double c) { return ::fma(a, b, c); }
__device__ __forceinline__ float reciprocal_sqrt(float x) { return 1.0f / ::sqrtf(x); }
__device__ __forceinline__ double reciprocal_sqrt(double x) { return 1.0 / ::sqrt(x); }

template <class Acc>
struct Welford {
  int64_t count;
  Acc mean, m2;
};

template <class Acc>
__device__ Welford<Acc> merge(Welford<Acc> a, Welford<Acc> b) {
  const int64_t n = a.count + b.count;
  if (n == 0) return a;
  const Acc c = static_cast<Acc>(b.count) / static_cast<Acc>(n);
  const Acc delta = b.mean - a.mean;
  return {n, a.mean + delta * c, a.m2 + b.m2 + delta * delta * c * static_cast<Acc>(a.count)};
}

// The block's merged moments, combined in a fixed tree order; returned to every thread.
template <class Acc>
__device__ Welford<Acc> block_moments(Welford<Acc> value) {
  __shared__ int64_t counts[kThreads];
  __shared__ Acc means[kThreads], m2s[kThreads];
  counts[threadIdx.x] = value.count;
  means[threadIdx.x] = value.mean;
  m2s[threadIdx.x] = value.m2;
  __syncthreads();
  for (int step = kThreads / 2; step > 0; step >>= 1) {
    if (threadIdx.x < step) {
      const Welford<Acc> merged =
          merge(Welford<Acc>{counts[threadIdx.x], means[threadIdx.x], m2s[threadIdx.x]},
                Welford<Acc>{counts[threadIdx.x + step], means[threadIdx.x + step], m2s[threadIdx.x + step]});
      counts[threadIdx.x] = merged.count;
      means[threadIdx.x] = merged.mean;
      m2s[threadIdx.x] = merged.m2;
    }
    __syncthreads();
  }
  const Welford<Acc> total{counts[0], means[0], m2s[0]};
  __syncthreads();
  return total;
}

template <class T>
__global__ void layer_norm_kernel(const T* x, const T* weight, const T* bias, int64_t rows, int64_t cols,
                                  Compute<T> eps, T* y, Compute<T>* mean_out, Compute<T>* rstd_out) {
  using Acc = Compute<T>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* in = x + row * cols;
    Welford<Acc> local{0, Acc(0), Acc(0)};
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const Acc v = load(in[j]);
      ++local.count;
      const Acc delta = v - local.mean;
      local.mean += delta / static_cast<Acc>(local.count);
      local.m2 += delta * (v - local.mean);
    }
    const Welford<Acc> moments = block_moments(local);
    const Acc mean = moments.mean;
    const Acc rstd = reciprocal_sqrt(moments.m2 / static_cast<Acc>(cols) + eps);
    if (threadIdx.x == 0) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
    const Acc shift = -rstd * mean;
    T* out = y + row * cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      Acc v = fused(load(in[j]), rstd, shift);
      if (weight != nullptr && bias != nullptr) {
        v = fused(v, load(weight[j]), load(bias[j]));
      } else if (weight != nullptr) {
        v = v * load(weight[j]);
      } else if (bias != nullptr) {
        v = v + load(bias[j]);
      }
      out[j] = store<T>(v);
    }
  }
}

template <class T>
__global__ void layer_norm_input_grad_kernel(const T* dy, const T* x, const Compute<T>* means,
                                             const Compute<T>* rstds, const T* weight, int64_t rows, int64_t cols,
                                             T* dx) {
  using Acc = Compute<T>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* g = dy + row * cols;
    const T* in = x + row * cols;
    Acc ds = 0, db = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const Acc w = weight != nullptr ? load(weight[j]) : Acc(1);
      const Acc gw = load(g[j]) * w;
      ds = fused(load(g[j]) * load(in[j]), w, ds);
      db += gw;
    }
    ds = block_sum(ds);
    db = block_sum(db);
    const Acc a = rstds[row], mean = means[row];
    const Acc scale = Acc(1) / static_cast<Acc>(cols);
    const Acc b = fused(db, mean, -ds) * a * a * a * scale;
    const Acc c = fused(-b, mean, -(db * a * scale));
    T* out = dx + row * cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const Acc w = weight != nullptr ? load(weight[j]) : Acc(1);
      out[j] = store<T>(fused(b, load(in[j]), a * load(g[j]) * w) + c);
    }
  }
}

// Pass 1 of dweight/dbias: partial[chunk][j] over rows [chunk * rows_per_chunk, ...).
template <class T>
__global__ void layer_norm_param_partial_kernel(const T* dy, const T* x, const Compute<T>* means,
                                                const Compute<T>* rstds, int64_t rows, int64_t cols,
                                                int64_t rows_per_chunk, Compute<T>* weight_partial,
                                                Compute<T>* bias_partial) {
  using Acc = Compute<T>;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * rows_per_chunk, end = min(rows, begin + rows_per_chunk);
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Acc dw = 0, db = 0;
    for (int64_t i = begin; i < end; ++i) {
      const Acc g = load(dy[i * cols + j]);
      if (weight_partial != nullptr) dw = fused(g, fused(rstds[i], load(x[i * cols + j]), -rstds[i] * means[i]), dw);
      db += g;
    }
    if (weight_partial != nullptr) weight_partial[chunk * cols + j] = dw;
    if (bias_partial != nullptr) bias_partial[chunk * cols + j] = db;
  }
}

// Pass 2: each column's partials added in chunk order.
template <class T>
__global__ void layer_norm_param_sum_kernel(const Compute<T>* partial, int64_t chunks, int64_t cols, T* out) {
  using Acc = Compute<T>;
  for (int64_t j = thread_index(); j < cols; j += thread_count()) {
    Acc sum = 0;
    for (int64_t k = 0; k < chunks; ++k) sum += partial[k * cols + j];
    out[j] = store<T>(sum);
  }
}

template <class T>
const T* pointer_or_null(const Tensor& t) {
  return t.defined() && t.numel() > 0 ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, kMaxBlocks)); }

}  // namespace

std::tuple<Tensor, Tensor, Tensor> layer_norm(const Tensor& input_in, const Shape& normalized_shape,
                                              const Tensor& weight_in, const Tensor& bias_in, double eps) {
  const LayerNormLayout layout = check_layer_norm_operands(input_in, normalized_shape, weight_in, bias_in, eps);
  DeviceGuard guard = enter_cuda_device(input_in, "layer_norm");
  const Device device = input_in.device();
  const NormalizationTensors t = normalization_tensors(input_in, weight_in, bias_in, layout.rows,
                                                       layer_norm_statistics_dtype(input_in.dtype()));
  if (layout.rows == 0) return {t.output, t.mean, t.inverse_std};
  device_dispatch_floating_bf16(t.input.dtype(), "layer_norm", [&]<class T>() {
    using Acc = Compute<T>;
    layer_norm_kernel<T><<<row_blocks(layout.rows), kThreads, 0, compute_stream(device.index)>>>(
        pointer_or_null<T>(t.input), pointer_or_null<T>(t.weight), pointer_or_null<T>(t.bias), layout.rows,
        layout.cols, static_cast<Acc>(eps), layout.cols > 0 ? static_cast<T*>(t.output.data_ptr()) : nullptr,
        static_cast<Acc*>(t.mean.data_ptr()), static_cast<Acc*>(t.inverse_std.data_ptr()));
    TS_CUDA_CHECK_LAUNCH("layer_norm_kernel");
  });
  return {t.output, t.mean, t.inverse_std};
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& grad_output_in, const Tensor& input_in,
                                                       const Shape& normalized_shape, const Tensor& mean_in,
                                                       const Tensor& rstd_in, const Tensor& weight_in,
                                                       std::array<bool, 3> output_mask) {
  const LayerNormLayout layout =
      check_layer_norm_backward_operands(grad_output_in, input_in, normalized_shape, mean_in, rstd_in, weight_in);
  check_cuda(grad_output_in, "layer_norm_backward");
  DeviceGuard guard(input_in.device());
  const Device device = input_in.device();
  Tensor grad_output = contiguous(grad_output_in), input = contiguous(input_in);
  Tensor mean = contiguous(mean_in), rstd = contiguous(rstd_in);
  Tensor weight = contiguous_if_defined(weight_in);
  Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[0]) grad_input = empty(input.sizes(), input.dtype(), device);
  if (output_mask[1]) grad_weight = zeros(normalized_shape, input.dtype(), device);
  if (output_mask[2]) grad_bias = zeros(normalized_shape, input.dtype(), device);
  if (layout.rows == 0 || layout.cols == 0) return {grad_input, grad_weight, grad_bias};
  const cudaStream_t stream = compute_stream(device.index);
  device_dispatch_floating_bf16(input.dtype(), "layer_norm_backward", [&]<class T>() {
    using Acc = Compute<T>;
    const auto* dy = static_cast<const T*>(grad_output.data_ptr());
    const auto* x = static_cast<const T*>(input.data_ptr());
    const auto* means = static_cast<const Acc*>(mean.data_ptr());
    const auto* rstds = static_cast<const Acc*>(rstd.data_ptr());
    if (output_mask[0]) {
      layer_norm_input_grad_kernel<T><<<row_blocks(layout.rows), kThreads, 0, stream>>>(
          dy, x, means, rstds, pointer_or_null<T>(weight), layout.rows, layout.cols,
          static_cast<T*>(grad_input.data_ptr()));
      TS_CUDA_CHECK_LAUNCH("layer_norm_input_grad_kernel");
    }
    if (!output_mask[1] && !output_mask[2]) return;
    // Chunks of at least 64 rows, at most 65535 of them (the grid's y limit).
    const int64_t rows_per_chunk = std::max<int64_t>(64, (layout.rows + kMaxBlocks - 1) / kMaxBlocks);
    const int64_t chunks = (layout.rows + rows_per_chunk - 1) / rows_per_chunk;
    const DType acc_dtype = layer_norm_statistics_dtype(input.dtype());
    Tensor weight_partial = output_mask[1] ? empty({chunks, layout.cols}, acc_dtype, device) : Tensor();
    Tensor bias_partial = output_mask[2] ? empty({chunks, layout.cols}, acc_dtype, device) : Tensor();
    const dim3 grid(blocks_for(layout.cols), static_cast<unsigned>(chunks));
    layer_norm_param_partial_kernel<T><<<grid, kThreads, 0, stream>>>(
        dy, x, means, rstds, layout.rows, layout.cols, rows_per_chunk,
        output_mask[1] ? static_cast<Acc*>(weight_partial.data_ptr()) : nullptr,
        output_mask[2] ? static_cast<Acc*>(bias_partial.data_ptr()) : nullptr);
    TS_CUDA_CHECK_LAUNCH("layer_norm_param_partial_kernel");
    for (auto [partial, out] : {std::pair{&weight_partial, &grad_weight}, std::pair{&bias_partial, &grad_bias}}) {
      if (!partial->defined()) continue;
      layer_norm_param_sum_kernel<T><<<blocks_for(layout.cols), kThreads, 0, stream>>>(
          static_cast<const Acc*>(partial->data_ptr()), chunks, layout.cols, static_cast<T*>(out->data_ptr()));
      TS_CUDA_CHECK_LAUNCH("layer_norm_param_sum_kernel");
    }
  });
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace tessera::cuda
