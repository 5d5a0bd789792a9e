// Adaptive average pooling on CUDA, with the CPU's bins and arithmetic
// (cpu/adaptive_pool.cpp). Forward: one thread per output cell, summing its bin in
// double. Backward: one thread per input element, adding the shares of every bin that
// contains it in the CPU's order (no atomics, so results are reproducible).
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/device_types.cuh"
#include "tessera/tensor/cuda/launch.cuh"
#include "tessera/tensor/cuda/kernels.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cuda {

using namespace native;

namespace {

struct AdaptiveParams {
  int64_t planes, height, width, out_h, out_w;
};

__device__ __forceinline__ int64_t bin_start(int64_t cell, int64_t cells, int64_t length) {
  return (cell * length) / cells;
}
__device__ __forceinline__ int64_t bin_end(int64_t cell, int64_t cells, int64_t length) {
  return ((cell + 1) * length + cells - 1) / cells;
}

template <class T>
__global__ void adaptive_avg_pool2d_kernel(const T* x, AdaptiveParams p, T* y) {
  const int64_t total = p.planes * p.out_h * p.out_w;
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    const int64_t ox = i % p.out_w, oy = (i / p.out_w) % p.out_h, plane = i / (p.out_w * p.out_h);
    const int64_t y0 = bin_start(oy, p.out_h, p.height), y1 = bin_end(oy, p.out_h, p.height);
    const int64_t x0 = bin_start(ox, p.out_w, p.width), x1 = bin_end(ox, p.out_w, p.width);
    const T* in = x + plane * p.height * p.width;
    double sum = 0;
    for (int64_t iy = y0; iy < y1; ++iy) {
      for (int64_t ix = x0; ix < x1; ++ix) sum += in[iy * p.width + ix];
    }
    y[i] = static_cast<T>(sum / static_cast<double>((y1 - y0) * (x1 - x0)));
  }
}

template <class T>
__global__ void adaptive_avg_pool2d_backward_kernel(const T* dy, AdaptiveParams p, T* dx) {
  const int64_t total = p.planes * p.height * p.width;
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    const int64_t ix = i % p.width, iy = (i / p.width) % p.height, plane = i / (p.width * p.height);
    // The cells whose bins contain (iy, ix) lie around iy * out / in; bins overlap by at most one cell.
    const int64_t oy_first = max(int64_t(0), (iy * p.out_h) / p.height - 1);
    const int64_t oy_last = min(p.out_h, ((iy + 1) * p.out_h + p.height - 1) / p.height + 1);
    const int64_t ox_first = max(int64_t(0), (ix * p.out_w) / p.width - 1);
    const int64_t ox_last = min(p.out_w, ((ix + 1) * p.out_w + p.width - 1) / p.width + 1);
    T total_grad = 0;
    for (int64_t oy = oy_first; oy < oy_last; ++oy) {
      const int64_t y0 = bin_start(oy, p.out_h, p.height), y1 = bin_end(oy, p.out_h, p.height);
      if (iy < y0 || iy >= y1) continue;
      for (int64_t ox = ox_first; ox < ox_last; ++ox) {
        const int64_t x0 = bin_start(ox, p.out_w, p.width), x1 = bin_end(ox, p.out_w, p.width);
        if (ix < x0 || ix >= x1) continue;
        total_grad += dy[(plane * p.out_h + oy) * p.out_w + ox] / static_cast<T>((y1 - y0) * (x1 - x0));
      }
    }
    dx[i] = total_grad;
  }
}

}  // namespace

Tensor adaptive_avg_pool2d(const Tensor& input_in, Size2 output_size) {
  check_adaptive_avg_pool2d_input(input_in, output_size);
  DeviceGuard guard = enter_cuda_device(input_in, "adaptive_avg_pool2d");
  Tensor input = contiguous(input_in);
  const AdaptiveParams p{input.size(0) * input.size(1), input.size(2), input.size(3), output_size.h, output_size.w};
  Tensor out = empty({input.size(0), input.size(1), p.out_h, p.out_w}, input.dtype(), input.device());
  if (out.numel() == 0) return out;
  device_dispatch_floating(input.dtype(), "adaptive_avg_pool2d", [&]<class T>() {
    adaptive_avg_pool2d_kernel<T><<<blocks_for(out.numel()), kThreads, 0, compute_stream(input.device().index)>>>(
        static_cast<const T*>(input.data_ptr()), p, static_cast<T*>(out.data_ptr()));
    TS_CUDA_CHECK_LAUNCH("adaptive_avg_pool2d_kernel");
  });
  return out;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output_in, const Shape& input_shape) {
  check_adaptive_avg_pool2d_backward(grad_output_in, input_shape);
  DeviceGuard guard = enter_cuda_device(grad_output_in, "adaptive_avg_pool2d_backward");
  Tensor grad_output = contiguous(grad_output_in);
  const AdaptiveParams p{input_shape[0] * input_shape[1], input_shape[2], input_shape[3], grad_output.size(2),
                         grad_output.size(3)};
  Tensor grad_input = empty(input_shape, grad_output.dtype(), grad_output.device());
  if (grad_input.numel() == 0) return grad_input;
  device_dispatch_floating(grad_output.dtype(), "adaptive_avg_pool2d_backward", [&]<class T>() {
    adaptive_avg_pool2d_backward_kernel<T><<<blocks_for(grad_input.numel()), kThreads, 0,
                                             compute_stream(grad_output.device().index)>>>(
        static_cast<const T*>(grad_output.data_ptr()), p, static_cast<T*>(grad_input.data_ptr()));
    TS_CUDA_CHECK_LAUNCH("adaptive_avg_pool2d_backward_kernel");
  });
  return grad_input;
}

}  // namespace tessera::cuda
