// AVX-512 building blocks shared by the float32 kernels (conv_shifted.cpp, sgemm.cpp; the
// lane masks also pool_avx512.cpp): an 8 x 48 outer-product register tile and transposing
// reductions of dot-product tiles.
// Compiled for AVX-512 whatever the build's baseline (isa.h); internal to src/tensor/cpu.
#pragma once

#include <cstdint>

#include "tessera/tensor/cpu/avx512_intrinsics.h"
#include "tessera/tensor/cpu/isa.h"
#include "tessera/tensor/cpu/scratch.h"

#if TESSERA_X86_KERNELS

TESSERA_AVX512_BEGIN

namespace tessera::cpu::avx512 {

constexpr int64_t kRows = 8;      // tile rows: output channels (forward) or input channels (dX)
constexpr int64_t kColumns = 48;  // tile columns: positions, three vectors of 16
constexpr int64_t kLanes = 16;

inline __mmask16 lanes_below(int64_t count) {
  if (count <= 0) return 0;
  if (count >= kLanes) return 0xFFFF;
  return static_cast<__mmask16>((1u << count) - 1);
}

// `v`, kept in a register: GCC's generic and AMD tunings would otherwise fold its load into
// every FMA that reads it, and a dot-product tile that reads each loaded vector 3 or 4
// times then waits on the load ports instead of the FMA units (a third slower here).
inline __m512 in_register(__m512 v) {
  asm("" : "+v"(v));
  return v;
}

// acc[r][v] = sum_k a[k * kRows + r] * b[offsets[k] + 16 v + lane], for v < kVectors (a
// narrower tile finishes a row whose length is not a multiple of 48).
// kMasked: lane l of the tile reads zero unless l < limits[k] - limit_base.
template <int kVectors, bool kMasked>
inline void gemm_tile(const float* a, const float* b, const int64_t* offsets, const int64_t* limits, int64_t limit_base,
                      int64_t depth, __m512 (&acc)[kRows][3]) {
  static_assert(kVectors >= 1 && kVectors <= 3);
#pragma GCC unroll 8
  for (int64_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 3
    for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < depth; ++k) {
    const float* row = b + offsets[k];
    __m512 column[kVectors];
#pragma GCC unroll 3
    for (int v = 0; v < kVectors; ++v) {
      if constexpr (kMasked) {
        column[v] = _mm512_maskz_loadu_ps(lanes_below(limits[k] - limit_base - v * kLanes), row + v * kLanes);
      } else {
        column[v] = _mm512_loadu_ps(row + v * kLanes);
      }
    }
    const float* ak = a + k * kRows;
#pragma GCC unroll 8
    for (int64_t r = 0; r < kRows; ++r) {
      const __m512 weight = _mm512_set1_ps(ak[r]);
#pragma GCC unroll 3
      for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm512_fmadd_ps(weight, column[v], acc[r][v]);
    }
  }
}

// The tile for `columns` (1 to 48) columns: as many vectors as they need; masked loads
// when asked, or when the tile is not a whole number of vectors.
inline void gemm_tile_for(int64_t columns, bool masked, const float* a, const float* b, const int64_t* offsets,
                          const int64_t* limits, int64_t limit_base, int64_t depth, __m512 (&acc)[kRows][3]) {
  const int vectors = static_cast<int>((columns + kLanes - 1) / kLanes);
  if (vectors >= 3) {
    masked ? gemm_tile<3, true>(a, b, offsets, limits, limit_base, depth, acc)
           : gemm_tile<3, false>(a, b, offsets, limits, limit_base, depth, acc);
  } else if (vectors == 2) {
    masked ? gemm_tile<2, true>(a, b, offsets, limits, limit_base, depth, acc)
           : gemm_tile<2, false>(a, b, offsets, limits, limit_base, depth, acc);
  } else {
    masked ? gemm_tile<1, true>(a, b, offsets, limits, limit_base, depth, acc)
           : gemm_tile<1, false>(a, b, offsets, limits, limit_base, depth, acc);
  }
}

// Lane i of the result is the sum of the 16 lanes of v[i], i < 16 (a transposing
// reduction: 15 adds and 30 shuffles for 16 sums).
inline __m512 sum_each16(const __m512* v) {
  __m512 halves[8], quarters[4], pairs[2];
  for (int i = 0; i < 8; ++i) {  // 256-bit halves of v[2i] | v[2i+1]
    __m512 low = _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44);
    __m512 high = _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE);
    halves[i] = _mm512_add_ps(low, high);
  }
  for (int i = 0; i < 4; ++i) {  // 128-bit quarter j now holds v[4i + j]
    __m512 low = _mm512_shuffle_f32x4(halves[2 * i], halves[2 * i + 1], 0x88);
    __m512 high = _mm512_shuffle_f32x4(halves[2 * i], halves[2 * i + 1], 0xDD);
    quarters[i] = _mm512_add_ps(low, high);
  }
  for (int i = 0; i < 2; ++i) {
    __m512 low = _mm512_shuffle_ps(quarters[2 * i], quarters[2 * i + 1], 0x44);
    __m512 high = _mm512_shuffle_ps(quarters[2 * i], quarters[2 * i + 1], 0xEE);
    pairs[i] = _mm512_add_ps(low, high);
  }
  __m512 low = _mm512_shuffle_ps(pairs[0], pairs[1], 0x88);
  __m512 high = _mm512_shuffle_ps(pairs[0], pairs[1], 0xDD);
  // Lane 4j + m holds the sum of v[4m + j]; put it at lane 4m + j.
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  return _mm512_permutexvar_ps(order, _mm512_add_ps(low, high));
}

// Lane i of the result is the sum of the 16 lanes of v[i], i < 8.
inline __m256 sum_each8(const __m512* v) {
  __m512 halves[4], quarters[2];
  for (int i = 0; i < 4; ++i) {
    __m512 low = _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44);
    __m512 high = _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE);
    halves[i] = _mm512_add_ps(low, high);
  }
  for (int i = 0; i < 2; ++i) {  // quarter j holds v[4i + j]
    __m512 low = _mm512_shuffle_f32x4(halves[2 * i], halves[2 * i + 1], 0x88);
    __m512 high = _mm512_shuffle_f32x4(halves[2 * i], halves[2 * i + 1], 0xDD);
    quarters[i] = _mm512_add_ps(low, high);
  }
  __m512 low = _mm512_shuffle_ps(quarters[0], quarters[1], 0x44);
  __m512 high = _mm512_shuffle_ps(quarters[0], quarters[1], 0xEE);
  __m512 pairs = _mm512_add_ps(low, high);  // quarter j: two partials of v[j], two of v[4 + j]
  __m512 sums = _mm512_add_ps(pairs, _mm512_shuffle_ps(pairs, pairs, 0xB1));
  const __m512i order = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 10, 6, 2, 12, 8, 4, 0);
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, sums));
}

}  // namespace tessera::cpu::avx512

TESSERA_AVX512_END

#endif  // TESSERA_X86_KERNELS
