// Dropout on the CPU with position-keyed Philox masks.
//
// The input is read as [rows, cols]. Element (r, c) is kept when its uniform draw
// u >= p, where u comes from Philox(key = seed ^ mix(stream), counter = (c / 4,
// first_row + r, step)), lane c % 4. The mask therefore depends on the global row, not
// on the batch split, and the CUDA kernel computes the same bits (dropout_key.h).
//
// With AVX-512 (chosen at run time, isa.h) the bits come 16 Philox blocks (64 elements) at a time, and the keep test
// u >= p is done on the integers: u = (bits >> 8) * 2^-24 exactly, so u >= p exactly when
// (bits >> 8) >= ceil(p * 2^24). The scalar dropout_mask_row stays the definition; the
// tests check that both give the same mask. Each row is masked and scaled in one pass.
#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>

#include "tessera/tensor/cpu/avx512_intrinsics.h"
#include "tessera/tensor/cpu/isa.h"
#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/dropout_key.h"
#include "tessera/tensor/kernel_shapes.h"

#if TESSERA_X86_KERNELS

TESSERA_AVX512_BEGIN

namespace tessera::cpu::avx512 {

using native::DropoutKey;

namespace {

// High 32 bits of a * multiplier in every 32-bit lane.
inline __m512i mul_high(__m512i a, __m512i multiplier, __m512i& low) {
  const __m512i even = _mm512_mul_epu32(a, multiplier);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), multiplier);
  low = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  return _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

// The keep-mask of one row, as dropout_mask_row computes it, 64 elements per step.
void dropout_keep_mask_row(const DropoutKey& key, int64_t row, int64_t cols, float p, uint8_t* mask) {
  const uint64_t philox_key = native::dropout_philox_key(key);
  const uint32_t threshold = static_cast<uint32_t>(std::ceil(static_cast<double>(p) * 16777216.0));
  const __m512i limit = _mm512_set1_epi32(static_cast<int32_t>(threshold));
  const __m512i mul0 = _mm512_set1_epi32(static_cast<int32_t>(0xD2511F53u));
  const __m512i mul1 = _mm512_set1_epi32(static_cast<int32_t>(0xCD9E8D57u));
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t first = 0; first < cols; first += 64) {
    __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(first / 4)), lane);
    __m512i c1 = _mm512_set1_epi32(static_cast<int32_t>(row));
    __m512i c2 = _mm512_set1_epi32(static_cast<int32_t>(key.step));
    __m512i c3 = _mm512_set1_epi32(static_cast<int32_t>(key.step >> 32));
    uint32_t key0 = static_cast<uint32_t>(philox_key), key1 = static_cast<uint32_t>(philox_key >> 32);
    for (int round = 0; round < 10; ++round) {
      __m512i low0, low1;
      const __m512i high0 = mul_high(c0, mul0, low0);
      const __m512i high1 = mul_high(c2, mul1, low1);
      const __m512i next0 = _mm512_xor_si512(_mm512_xor_si512(high1, c1), _mm512_set1_epi32(static_cast<int32_t>(key0)));
      const __m512i next2 = _mm512_xor_si512(_mm512_xor_si512(high0, c3), _mm512_set1_epi32(static_cast<int32_t>(key1)));
      c0 = next0;
      c1 = low1;
      c2 = next2;
      c3 = low0;
      key0 += 0x9E3779B9u;
      key1 += 0xBB67AE85u;
    }
    // Word w of block i decides element 4 i + w.
    const uint64_t keep0 = _mm512_cmpge_epu32_mask(_mm512_srli_epi32(c0, 8), limit);
    const uint64_t keep1 = _mm512_cmpge_epu32_mask(_mm512_srli_epi32(c1, 8), limit);
    const uint64_t keep2 = _mm512_cmpge_epu32_mask(_mm512_srli_epi32(c2, 8), limit);
    const uint64_t keep3 = _mm512_cmpge_epu32_mask(_mm512_srli_epi32(c3, 8), limit);
    const __mmask64 keep = _pdep_u64(keep0, 0x1111111111111111ull) | _pdep_u64(keep1, 0x2222222222222222ull) |
                           _pdep_u64(keep2, 0x4444444444444444ull) | _pdep_u64(keep3, 0x8888888888888888ull);
    const int64_t count = std::min<int64_t>(64, cols - first);
    const __mmask64 store = count == 64 ? ~__mmask64{0} : (__mmask64{1} << count) - 1;
    _mm512_mask_storeu_epi8(mask + first, store, _mm512_maskz_mov_epi8(keep, ones));
  }
}

}  // namespace

}  // namespace tessera::cpu::avx512

TESSERA_AVX512_END
#endif  // TESSERA_X86_KERNELS

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
