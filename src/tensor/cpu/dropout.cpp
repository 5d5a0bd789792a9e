// Dropout on the CPU with position-keyed Philox masks.
//
// The input is read as [rows, cols]. Element (r, c) is kept when its uniform draw
// u >= p, where u comes from Philox(key = seed ^ mix(stream), counter = (c / 4,
// first_row + r, step)), lane c % 4. The mask therefore depends on the global row, not
// on the batch split, and the CUDA kernel computes the same bits.
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/dropout_key.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cpu {

using namespace native;

std::tuple<Tensor, Tensor> dropout(const Tensor& input_in, double p, const DropoutKey& key) {
  check_defined(input_in, "dropout");
  check_cpu(input_in, "dropout");
  check_dropout_probability(p);
  Tensor input = contiguous(input_in);
  const auto [rows, cols] = dropout_layout(input);
  Tensor out = empty(input.sizes(), input.dtype(), input.device());
  Tensor mask = empty(input.sizes(), DType::u8, input.device());
  const float threshold = static_cast<float>(p);
  uint8_t* m = mask.data_ptr<uint8_t>();
#pragma omp parallel for if (input.numel() > cpu::kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    dropout_mask_row(key, key.first_row + r, cols, threshold, m + r * cols);
  }
  dispatch_floating(input.dtype(), "dropout", [&]<class T>() {
    const T scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    const T* x = static_cast<const T*>(input.data_ptr());
    T* y = out.data_ptr<T>();
    const int64_t n = input.numel();
#pragma omp parallel for if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) y[i] = m[i] ? x[i] * scale : T(0);
  });
  return {out, mask};
}

Tensor dropout_backward(const Tensor& grad_output_in, const Tensor& mask_in, double p) {
  check_dropout_backward_operands(grad_output_in, mask_in);
  check_cpu(grad_output_in, "dropout_backward");
  Tensor grad_output = contiguous(grad_output_in), mask = contiguous(mask_in);
  Tensor grad_input = empty(grad_output.sizes(), grad_output.dtype(), grad_output.device());
  dispatch_floating(grad_output.dtype(), "dropout_backward", [&]<class T>() {
    const T scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    const T* dy = static_cast<const T*>(grad_output.data_ptr());
    const uint8_t* m = static_cast<const uint8_t*>(mask.data_ptr());
    T* dx = grad_input.data_ptr<T>();
    const int64_t n = grad_output.numel();
#pragma omp parallel for if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) dx[i] = m[i] ? dy[i] * scale : T(0);
  });
  return grad_input;
}

}  // namespace tessera::cpu
