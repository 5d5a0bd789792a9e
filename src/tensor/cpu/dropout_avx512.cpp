// Dropout's keep-mask with AVX-512 (chosen at run time: dropout.cpp, isa.h): 16 Philox
// blocks (64 elements) at a time, and the keep test u >= p done on the integers:
// u = (bits >> 8) * 2^-24 exactly, so u >= p exactly when (bits >> 8) >= ceil(p * 2^24).
// The scalar native::dropout_mask_row stays the definition; the tests check that both give
// the same mask.
#include <algorithm>
#include <cmath>

#include "tessera/tensor/cpu/avx512_intrinsics.h"
#include "tessera/tensor/cpu/avx512_kernels.h"
#include "tessera/tensor/dropout_key.h"

#if TESSERA_X86_KERNELS

TESSERA_AVX512_BEGIN

namespace tessera::cpu::avx512 {

namespace {

// High 32 bits of a * multiplier in every 32-bit lane.
inline __m512i mul_high(__m512i a, __m512i multiplier, __m512i& low) {
  const __m512i even = _mm512_mul_epu32(a, multiplier);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), multiplier);
  low = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  return _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

}  // namespace

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

}  // namespace tessera::cpu::avx512

TESSERA_AVX512_END

#endif  // TESSERA_X86_KERNELS
