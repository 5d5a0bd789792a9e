// Dropout on CUDA with the CPU's position-keyed Philox masks.
//
// The input is read as [rows, cols] (kernel_shapes.h: dropout_layout). One thread draws
// one Philox block, i.e. the keep bits of four neighbouring elements of one row, through
// dropout_bits() from dropout_key.h, the very function the CPU calls: the same elements
// are dropped on both devices, whatever the batch split. Kept elements are scaled by
// 1 / (1 - p), computed in double and rounded to the element type, as on the CPU.
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/elementwise.cuh"
#include "tessera/tensor/cuda/kernels.h"
#include "tessera/tensor/dropout_key.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cuda {

using namespace native;

namespace {

template <class T>
__global__ void dropout_kernel(const T* x, int64_t rows, int64_t cols, uint64_t philox_key, uint64_t step,
                               int64_t first_row, float p, Compute<T> scale, T* y, uint8_t* mask) {
  const int64_t blocks_per_row = (cols + 3) / 4;
  const int64_t total = rows * blocks_per_row;
  for (int64_t t = thread_index(); t < total; t += thread_count()) {
    const int64_t row = t / blocks_per_row, block = t % blocks_per_row;
    const philox::Counter bits = dropout_bits(philox_key, step, first_row + row, block);
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t col = block * 4 + lane;
      if (col >= cols) break;
      const int64_t i = row * cols + col;
      const bool keep = philox::unit_float(bits.word[lane]) >= p;
      mask[i] = keep;
      y[i] = keep ? store<T>(static_cast<Compute<T>>(load(x[i]) * scale)) : store<T>(Compute<T>(0));
    }
  }
}

template <class T>
struct DropoutBackwardFunctor {
  Compute<T> scale;
  __device__ T operator()(T grad, uint8_t keep) const {
    return keep ? store<T>(static_cast<Compute<T>>(load(grad) * scale)) : store<T>(Compute<T>(0));
  }
};

// 1 / (1 - p) in double, rounded to the compute type; 0 when everything is dropped.
template <class T>
Compute<T> keep_scale(double p) {
  return p < 1 ? static_cast<Compute<T>>(1.0 / (1.0 - p)) : Compute<T>(0);
}

}  // namespace

std::tuple<Tensor, Tensor> dropout(const Tensor& input_in, double p, const DropoutKey& key) {
  check_defined(input_in, "dropout");
  check_cuda(input_in, "dropout");
  check_dropout_probability(p);
  DeviceGuard guard(input_in.device());
  Tensor input = contiguous(input_in);
  const auto [rows, cols] = dropout_layout(input);
  Tensor out = empty(input.sizes(), input.dtype(), input.device());
  Tensor mask = empty(input.sizes(), DType::u8, input.device());
  if (input.numel() == 0) return {out, mask};
  device_dispatch_floating_bf16(input.dtype(), "dropout", [&]<class T>() {
    const int64_t work = rows * ((cols + 3) / 4);
    dropout_kernel<T><<<blocks_for(work), kThreads, 0, compute_stream(input.device().index)>>>(
        static_cast<const T*>(input.data_ptr()), rows, cols, dropout_philox_key(key), key.step, key.first_row,
        static_cast<float>(p), keep_scale<T>(p), static_cast<T*>(out.data_ptr()),
        static_cast<uint8_t*>(mask.data_ptr()));
    TS_CUDA_CHECK_LAUNCH("dropout_kernel");
  });
  return {out, mask};
}

Tensor dropout_backward(const Tensor& grad_output_in, const Tensor& mask_in, double p) {
  check_dropout_backward_operands(grad_output_in, mask_in);
  DeviceGuard guard = enter_cuda_device(grad_output_in, "dropout_backward");
  Tensor grad_output = contiguous(grad_output_in), mask = contiguous(mask_in);
  Tensor grad_input = empty(grad_output.sizes(), grad_output.dtype(), grad_output.device());
  device_dispatch_floating_bf16(grad_output.dtype(), "dropout_backward", [&]<class T>() {
    zip_into<T, T, uint8_t>(grad_input, grad_output, mask, DropoutBackwardFunctor<T>{keep_scale<T>(p)});
  });
  return grad_input;
}

}  // namespace tessera::cuda
