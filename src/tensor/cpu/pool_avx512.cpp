// float32 2 x 2 / stride 2 max pooling with AVX-512 (chosen at run time: pool.cpp, isa.h):
// 16 windows per step, with pool.cpp's rules (the first NaN of a window wins, indices are
// flat positions in the plane), and a backward that writes every input gradient element
// once (the windows do not overlap) instead of zero-filling and scattering.
#include <algorithm>

#include "tessera/tensor/cpu/avx512_intrinsics.h"
#include "tessera/tensor/cpu/avx512_kernels.h"
#include "tessera/tensor/cpu/avx512_tiles.h"

#if TESSERA_X86_KERNELS

TESSERA_AVX512_BEGIN

namespace tessera::cpu::avx512 {

namespace {

// Lanes where `value` replaces `best`: greater, or the first NaN.
inline __mmask16 replaces(__m512 value, __m512 best) {
  return _mm512_cmp_ps_mask(value, best, _CMP_GT_OQ) |
         (_mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q) & ~_mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q));
}

}  // namespace

// One plane of 2 x 2 / stride 2 pooling: 16 output columns per step.
void pool2x2_plane(const float* x, int64_t width, int64_t out_h, int64_t out_w, float* y, int64_t* indices) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t oy = 0; oy < out_h; ++oy) {
    const float* top = x + 2 * oy * width;
    const float* bottom = top + width;
    for (int64_t ox = 0; ox < out_w; ox += 16) {
      const int64_t count = std::min<int64_t>(16, out_w - ox);
      const __mmask16 first_half = lanes_below(2 * count), second_half = lanes_below(2 * count - 16);
      const __m512 t0 = _mm512_maskz_loadu_ps(first_half, top + 2 * ox);
      const __m512 t1 = _mm512_maskz_loadu_ps(second_half, top + 2 * ox + 16);
      const __m512 b0 = _mm512_maskz_loadu_ps(first_half, bottom + 2 * ox);
      const __m512 b1 = _mm512_maskz_loadu_ps(second_half, bottom + 2 * ox + 16);
      // The window's four values in reading order: top-left, top-right, bottom-left, bottom-right.
      const __m512 v[4] = {_mm512_permutex2var_ps(t0, even, t1), _mm512_permutex2var_ps(t0, odd, t1),
                           _mm512_permutex2var_ps(b0, even, b1), _mm512_permutex2var_ps(b0, odd, b1)};
      const int32_t offsets[4] = {0, 1, static_cast<int32_t>(width), static_cast<int32_t>(width) + 1};
      __m512 best = v[0];
      __m512i choice = _mm512_setzero_si512();
      for (int k = 1; k < 4; ++k) {
        const __mmask16 take = replaces(v[k], best);
        best = _mm512_mask_blend_ps(take, best, v[k]);
        choice = _mm512_mask_blend_epi32(take, choice, _mm512_set1_epi32(offsets[k]));
      }
      // index = (2 oy) * W + 2 (ox + lane) + offset
      const __m512i base = _mm512_set1_epi32(static_cast<int32_t>(2 * oy * width + 2 * ox));
      const __m512i index = _mm512_add_epi32(_mm512_add_epi32(base, _mm512_slli_epi32(lane, 1)), choice);
      const __mmask16 valid = lanes_below(count);
      _mm512_mask_storeu_ps(y + oy * out_w + ox, valid, best);
      int64_t* out_index = indices + oy * out_w + ox;
      _mm512_mask_storeu_epi64(out_index, static_cast<__mmask8>(valid), _mm512_cvtepi32_epi64(_mm512_castsi512_si256(index)));
      _mm512_mask_storeu_epi64(out_index + 8, static_cast<__mmask8>(valid >> 8),
                               _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(index, 1)));
    }
  }
}

// The backward of one plane: each input element gets its window's gradient if it was the
// window's choice, else zero; rows and columns outside every window get zero too. Returns
// false if an index lies outside its 2 x 2 window (the indices came from other options).
bool pool2x2_backward_plane(const float* dy, const int64_t* indices, int64_t height, int64_t width, int64_t out_h,
                            int64_t out_w, float* dx) {
  const __m512i low_interleave = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i high_interleave = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t oy = 0; oy < out_h; ++oy) {
    float* top = dx + 2 * oy * width;
    float* bottom = top + width;
    for (int64_t ox = 0; ox < out_w; ox += 16) {
      const int64_t count = std::min<int64_t>(16, out_w - ox);
      const __mmask16 valid = lanes_below(count);
      const __m512 g = _mm512_maskz_loadu_ps(valid, dy + oy * out_w + ox);
      const int64_t* in_index = indices + oy * out_w + ox;
      const __m256i low = _mm512_cvtepi64_epi32(_mm512_maskz_loadu_epi64(static_cast<__mmask8>(valid), in_index));
      const __m256i high = _mm512_cvtepi64_epi32(_mm512_maskz_loadu_epi64(static_cast<__mmask8>(valid >> 8), in_index + 8));
      // Offset of the choice within its window: index - (2 oy W + 2 (ox + lane)).
      const __m512i base = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(2 * oy * width + 2 * ox)),
                                            _mm512_slli_epi32(lane, 1));
      const __m512i offset = _mm512_sub_epi32(_mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1), base);
      const int32_t offsets[4] = {0, 1, static_cast<int32_t>(width), static_cast<int32_t>(width) + 1};
      __m512 v[4];
      __mmask16 matched = 0;
      for (int k = 0; k < 4; ++k) {
        const __mmask16 here = _mm512_cmpeq_epi32_mask(offset, _mm512_set1_epi32(offsets[k]));
        v[k] = _mm512_maskz_mov_ps(here, g);
        matched |= here;
      }
      if ((matched & valid) != valid) return false;
      const __mmask16 first_half = lanes_below(2 * count), second_half = lanes_below(2 * count - 16);
      _mm512_mask_storeu_ps(top + 2 * ox, first_half, _mm512_permutex2var_ps(v[0], low_interleave, v[1]));
      _mm512_mask_storeu_ps(top + 2 * ox + 16, second_half, _mm512_permutex2var_ps(v[0], high_interleave, v[1]));
      _mm512_mask_storeu_ps(bottom + 2 * ox, first_half, _mm512_permutex2var_ps(v[2], low_interleave, v[3]));
      _mm512_mask_storeu_ps(bottom + 2 * ox + 16, second_half, _mm512_permutex2var_ps(v[2], high_interleave, v[3]));
    }
    // An odd width leaves a last column outside every window.
    for (int64_t column = 2 * out_w; column < width; ++column) top[column] = bottom[column] = 0.0f;
  }
  // An odd height leaves rows below the last window.
  std::fill(dx + 2 * out_h * width, dx + height * width, 0.0f);
  return true;
}

}  // namespace tessera::cpu::avx512

TESSERA_AVX512_END

#endif  // TESSERA_X86_KERNELS
