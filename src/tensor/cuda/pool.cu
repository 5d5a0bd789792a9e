// 2-D max pooling on CUDA: a kernel of Tessera's own rather than cuDNN's pooling.
//
// The backward takes only the indices (native.h: max_pool2d_backward), which cuDNN's
// pooling does not produce, and the CPU's choice rules must hold exactly: the first
// maximum in row-major window order wins, a NaN wins and stops the search, padding never
// wins. Indices are flat positions h * W + w within each input plane, as PyTorch's.
// Forward: one thread per output element. Backward: one thread per output element adds
// its gradient to the chosen input with atomicAdd (windows may overlap when stride <
// kernel, so the order of those additions, and the last bits of their sum, may vary).
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/device_types.cuh"
#include "tessera/tensor/cuda/launch.cuh"
#include "tessera/tensor/cuda/kernels.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cuda {

using namespace native;

namespace {

struct PoolParams {
  int64_t planes, height, width, out_h, out_w;
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
};

template <class T>
__global__ void max_pool2d_kernel(const T* x, PoolParams p, T* y, int64_t* indices) {
  const int64_t total = p.planes * p.out_h * p.out_w;
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    const int64_t ox = i % p.out_w;
    const int64_t oy = (i / p.out_w) % p.out_h;
    const int64_t plane_index = i / (p.out_w * p.out_h);
    const T* plane = x + plane_index * p.height * p.width;
    const int64_t y0 = oy * p.stride_h - p.pad_h, x0 = ox * p.stride_w - p.pad_w;
    const int64_t y_begin = y0 > 0 ? y0 : 0, x_begin = x0 > 0 ? x0 : 0;
    const int64_t y_end = y0 + p.kernel_h < p.height ? y0 + p.kernel_h : p.height;
    const int64_t x_end = x0 + p.kernel_w < p.width ? x0 + p.kernel_w : p.width;
    T best{};
    Compute<T> best_value = 0;
    int64_t best_index = -1;
    bool found_nan = false;
    for (int64_t ky = y_begin; ky < y_end && !found_nan; ++ky) {
      for (int64_t kx = x_begin; kx < x_end; ++kx) {
        const T v = plane[ky * p.width + kx];
        const Compute<T> value = load(v);
        const bool is_nan = value != value;
        if (best_index < 0 || value > best_value || is_nan) {
          best = v;
          best_value = value;
          best_index = ky * p.width + kx;
          if (is_nan) {
            found_nan = true;
            break;
          }
        }
      }
    }
    y[i] = best;
    indices[i] = best_index;
  }
}

template <class T>
__global__ void max_pool2d_backward_kernel(const T* grad_output, const int64_t* indices, int64_t planes,
                                           int64_t out_plane, int64_t in_plane, T* grad_input) {
  const int64_t total = planes * out_plane;
  for (int64_t i = thread_index(); i < total; i += thread_count()) {
    const int64_t index = indices[i];
    if (index < 0 || index >= in_plane) continue;  // not from max_pool2d: never write out of bounds
    atomicAdd(grad_input + (i / out_plane) * in_plane + index, grad_output[i]);
  }
}

}  // namespace

std::tuple<Tensor, Tensor> max_pool2d(const Tensor& input_in, const MaxPool2dWindow& o) {
  check_defined(input_in, "max_pool2d");
  check_cuda(input_in, "max_pool2d");
  const PoolGeometry g = max_pool2d_geometry(input_in, o);
  DeviceGuard guard(input_in.device());
  Tensor input = contiguous(input_in);
  Tensor out = empty({input.size(0), input.size(1), g.out_h, g.out_w}, input.dtype(), input.device());
  Tensor indices = empty(out.sizes(), DType::i64, input.device());
  if (out.numel() == 0) return {out, indices};
  const PoolParams params{g.planes, g.height, g.width, g.out_h, g.out_w, o.kernel[0], o.kernel[1],
                          o.stride[0], o.stride[1], o.padding[0], o.padding[1]};
  device_dispatch_floating_bf16(input.dtype(), "max_pool2d", [&]<class T>() {
    max_pool2d_kernel<T><<<blocks_for(out.numel()), kThreads, 0, compute_stream(input.device().index)>>>(
        static_cast<const T*>(input.data_ptr()), params, static_cast<T*>(out.data_ptr()),
        static_cast<int64_t*>(indices.data_ptr()));
    TS_CUDA_CHECK_LAUNCH("max_pool2d_kernel");
  });
  return {out, indices};
}

Tensor max_pool2d_backward(const Tensor& grad_output_in, const Tensor& indices_in, const Shape& input_shape) {
  check_max_pool2d_backward_operands(grad_output_in, indices_in, input_shape);
  DeviceGuard guard = enter_cuda_device(grad_output_in, "max_pool2d_backward");
  Tensor grad_output = contiguous(grad_output_in), indices = contiguous(indices_in);
  Tensor grad_input = empty(input_shape, grad_output.dtype(), grad_output.device());
  device_dispatch_floating(grad_output.dtype(), "max_pool2d_backward", [&]<class T>() {
    cuda::fill_(grad_input, 0.0);
    const int64_t planes = input_shape[0] * input_shape[1];
    const int64_t in_plane = input_shape[2] * input_shape[3];
    const int64_t out_plane = grad_output.size(2) * grad_output.size(3);
    if (planes * out_plane == 0) return;
    max_pool2d_backward_kernel<T><<<blocks_for(planes * out_plane), kThreads, 0,
                                    compute_stream(grad_output.device().index)>>>(
        static_cast<const T*>(grad_output.data_ptr()), static_cast<const int64_t*>(indices.data_ptr()), planes,
        out_plane, in_plane, static_cast<T*>(grad_input.data_ptr()));
    TS_CUDA_CHECK_LAUNCH("max_pool2d_backward_kernel");
  });
  return grad_input;
}

}  // namespace tessera::cuda
