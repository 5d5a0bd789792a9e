// Batch normalisation on CUDA, with the CPU kernel's arithmetic (cpu/batch_norm.cpp).
//
// One block per channel: its threads walk the channel's N x inner elements, accumulate
// the sums in double and combine them in a fixed tree order (reproducible run to run);
// thread 0 derives mean, invstd and the running-statistics update exactly as the CPU
// does, and then every thread writes its share of the output. The backward reduces
// sum(dy) and sum((x - mean) * dy) the same way and writes dx, dweight, dbias.
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/device_types.cuh"
#include "tessera/tensor/cuda/launch.cuh"
#include "tessera/tensor/cuda/kernels.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cuda {

using namespace native;

namespace {

struct Channels {
  int64_t outer, channels, inner;
};

// Element k of channel c (k runs over outer * inner).
__device__ __forceinline__ int64_t element(const Channels& l, int64_t c, int64_t k) {
  return ((k / l.inner) * l.channels + c) * l.inner + k % l.inner;
}

template <class T>
__global__ void batch_norm_kernel(const T* x, const T* weight, const T* bias, T* running_mean, T* running_var,
                                  Channels l, bool training, double momentum, double eps, T* y, T* save_mean,
                                  T* save_invstd) {
  __shared__ T channel_mean, channel_invstd;
  const int64_t c = blockIdx.x;
  const int64_t n = l.outer * l.inner;
  if (training) {
    double sum = 0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) sum += x[element(l, c, k)];
    sum = block_sum(sum);
    const T mean = static_cast<T>(sum / static_cast<double>(n));
    double square_sum = 0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      const T centred = x[element(l, c, k)] - mean;
      square_sum += centred * centred;
    }
    square_sum = block_sum(square_sum);
    if (threadIdx.x == 0) {
      const T var_sum = static_cast<T>(square_sum);
      const T biased_var = var_sum / static_cast<T>(n);
      channel_mean = mean;
      channel_invstd = static_cast<T>(1.0 / sqrt(static_cast<double>(biased_var) + eps));
      if (running_mean != nullptr) {
        const T unbiased_var = var_sum / static_cast<T>(n - 1);
        running_mean[c] = static_cast<T>(momentum * mean + (1 - momentum) * running_mean[c]);
        running_var[c] = static_cast<T>(momentum * unbiased_var + (1 - momentum) * running_var[c]);
      }
    }
  } else if (threadIdx.x == 0) {
    channel_mean = running_mean[c];
    channel_invstd = static_cast<T>(1) / sqrt(running_var[c] + static_cast<T>(eps));
  }
  __syncthreads();
  const T mean = channel_mean, invstd = channel_invstd;
  if (threadIdx.x == 0) {
    save_mean[c] = mean;
    save_invstd[c] = invstd;
  }
  const T alpha = invstd * (weight != nullptr ? weight[c] : static_cast<T>(1));
  const T beta = (bias != nullptr ? bias[c] : static_cast<T>(0)) - mean * alpha;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    const int64_t at = element(l, c, k);
    y[at] = x[at] * alpha + beta;
  }
}

template <class T>
__global__ void batch_norm_backward_kernel(const T* dy, const T* x, const T* weight, const T* means,
                                           const T* invstds, Channels l, bool training, T* dx, T* dweight, T* dbias) {
  const int64_t c = blockIdx.x;
  const int64_t n = l.outer * l.inner;
  const T mean = means[c], invstd = invstds[c];
  const T scale = weight != nullptr ? weight[c] : static_cast<T>(1);
  double sum = 0, dot = 0;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    const int64_t at = element(l, c, k);
    sum += dy[at];
    dot += static_cast<T>(x[at] - mean) * dy[at];
  }
  sum = block_sum(sum);
  dot = block_sum(dot);
  if (dx != nullptr) {
    if (training) {
      const T k_factor = static_cast<T>(dot) * invstd * invstd / static_cast<T>(n);
      const T grad_mean = static_cast<T>(sum / static_cast<double>(n));
      for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
        const int64_t at = element(l, c, k);
        const T projection = (x[at] - mean) * k_factor;
        dx[at] = (dy[at] - grad_mean - projection) * invstd * scale;
      }
    } else {
      for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
        const int64_t at = element(l, c, k);
        dx[at] = dy[at] * invstd * scale;
      }
    }
  }
  if (threadIdx.x == 0) {
    if (dweight != nullptr) dweight[c] = static_cast<T>(dot * invstd);
    if (dbias != nullptr) dbias[c] = static_cast<T>(sum);
  }
}

template <class T>
const T* pointer_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

template <class T>
T* mutable_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> batch_norm(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in,
                                              const Tensor& running_mean, const Tensor& running_var,
                                              bool training, double momentum, double eps) {
  const ChannelLayout layout =
      check_batch_norm_operands(input_in, weight_in, bias_in, running_mean, running_var, training, eps);
  DeviceGuard guard = enter_cuda_device(input_in, "batch_norm");
  const NormalizationTensors t =
      normalization_tensors(input_in, weight_in, bias_in, layout.channels, input_in.dtype());
  if (layout.channels == 0) return {t.output, t.mean, t.inverse_std};
  const Channels l{layout.outer, layout.channels, layout.inner};
  device_dispatch_floating(t.input.dtype(), "batch_norm", [&]<class T>() {
    batch_norm_kernel<T><<<static_cast<unsigned>(layout.channels), kThreads, 0,
                           compute_stream(input_in.device().index)>>>(
        pointer_or_null<T>(t.input), pointer_or_null<T>(t.weight), pointer_or_null<T>(t.bias),
        mutable_or_null<T>(running_mean), mutable_or_null<T>(running_var), l, training, momentum, eps,
        mutable_or_null<T>(t.output), mutable_or_null<T>(t.mean), mutable_or_null<T>(t.inverse_std));
    TS_CUDA_CHECK_LAUNCH("batch_norm_kernel");
  });
  return {t.output, t.mean, t.inverse_std};
}

// Operands checked, made contiguous and the gradients allocated by the dispatch layer.
void batch_norm_backward(const BatchNormBackwardCall& call) {
  DeviceGuard guard(call.device());
  const ChannelLayout& layout = call.layout;
  const Channels l{layout.outer, layout.channels, layout.inner};
  device_dispatch_floating(call.input.dtype(), "batch_norm_backward", [&]<class T>() {
    batch_norm_backward_kernel<T><<<static_cast<unsigned>(layout.channels), kThreads, 0,
                                    compute_stream(call.device().index)>>>(
        pointer_or_null<T>(call.grad_output), pointer_or_null<T>(call.input), pointer_or_null<T>(call.weight),
        pointer_or_null<T>(call.save_mean), pointer_or_null<T>(call.save_invstd), l, call.training,
        mutable_or_null<T>(call.grad_input), mutable_or_null<T>(call.grad_weight), mutable_or_null<T>(call.grad_bias));
    TS_CUDA_CHECK_LAUNCH("batch_norm_backward_kernel");
  });
}

}  // namespace tessera::cuda
