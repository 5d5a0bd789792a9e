// Dropout on the CPU with position-keyed Philox masks.
//
// The input is read as [rows, cols]. Element (r, c) is kept when its uniform draw
// u >= p, where u comes from Philox(key = seed ^ mix(stream), counter = (c / 4,
// first_row + r, step)), lane c % 4. The mask therefore depends on the global row, not
// on the batch split, and the CUDA kernel computes the same bits (dropout_key.h).
//
// With AVX-512 (chosen at run time, isa.h) the mask bits come from dropout_avx512.cpp, 64
// elements at a time; the scalar dropout_mask_row stays the definition, and the tests check
// that both give the same mask. Each row is masked and scaled in one pass.
#include <bit>
#include <type_traits>

#include "tessera/tensor/cpu/avx512_kernels.h"
#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/dropout_key.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cpu {

using namespace native;

namespace {

// `value` where keep is nonzero, else +0: an AND with an all-ones or all-zero word, which
// compilers vectorise at any ISA level (a select on a byte beside a float they do not).
template <class T>
T keep_or_zero(T value, uint8_t keep) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  const Bits all = Bits{0} - static_cast<Bits>(keep != 0);
  return std::bit_cast<T>(std::bit_cast<Bits>(value) & all);
}

}  // namespace

std::tuple<Tensor, Tensor> dropout(const Tensor& input_in, double p, const DropoutKey& key) {
  check_defined(input_in, "dropout");
  check_cpu(input_in, "dropout");
  check_dropout_probability(p);
  Tensor input = contiguous(input_in);
  const DropoutLayout layout = dropout_layout(input);
  const int64_t rows = layout.rows, cols = layout.cols;  // (OpenMP regions cannot name structured bindings in clang 14)
  Tensor out = empty(input.sizes(), input.dtype(), input.device());
  Tensor mask = empty(input.sizes(), DType::u8, input.device());
  const float threshold = static_cast<float>(p);
  uint8_t* m = mask.data_ptr<uint8_t>();
  auto keep_mask_row = dropout_mask_row;
#if TESSERA_X86_KERNELS
  if (use_avx512()) keep_mask_row = avx512::dropout_keep_mask_row;
#endif
  dispatch_floating(input.dtype(), "dropout", [&]<class T>() {
    const T scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    const T* x = static_cast<const T*>(input.data_ptr());
    T* y = out.data_ptr<T>();
    // Row by row, so the mask is still in cache when it is applied.
#pragma omp parallel for schedule(static) if (input.numel() > cpu::kParallelGrain)
    for (int64_t r = 0; r < rows; ++r) {
      uint8_t* mask_row = m + r * cols;
      keep_mask_row(key, key.first_row + r, cols, threshold, mask_row);
      const T* x_row = x + r * cols;
      T* y_row = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) y_row[c] = keep_or_zero(x_row[c] * scale, mask_row[c]);
    }
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
    for (int64_t i = 0; i < n; ++i) dx[i] = keep_or_zero(dy[i] * scale, m[i]);
  });
  return grad_input;
}

}  // namespace tessera::cpu
