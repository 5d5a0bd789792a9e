// bfloat16 GEMM on AVX512-BF16 (VDPBF16PS), in gemm.h's row-major convention, the
// output rounded to bfloat16 once, as oneDNN's (PyTorch's CPU bfloat16 matmul) is.
//
// VDPBF16PS multiplies 16 pairs of bfloat16 and adds both products of a pair to a float32
// lane: so k is taken two at a time and both operands are packed with each pair of k
// side by side in one 32-bit word (the pair-interleaved layout). A is packed in 8-row
// panels, word [p][r] = (A[r, 2p], A[r, 2p + 1]); B per 48-column tile, word [p][j] =
// (B[2p, j], B[2p + 1, j]); a last odd k pairs with zero, rows and columns past the ends
// are zero. The register tile is 8 rows x 48 columns (24 float32 accumulators): per pair
// of k, three B vectors and one broadcast A word per row. The loops are sgemm.cpp's outer
// products with depth blocks of 2048 and no row blocks: A is packed whole for the block,
// each thread packs its column tile's B panel (192 KiB, in L2) and passes it over every
// row tile. Sums carried between depth blocks (past k = 2048) are float32 (a scratch C);
// the last block adds its part, applies alpha and beta, and rounds to bfloat16 with the
// bits of BFloat16(float) (round to nearest even, NaN kept quiet). VDPBF16PS treats
// subnormal inputs as zero and flushes subnormal results (Intel's definition); the
// portable path (bf16_gemm.cpp) keeps them, which changes only sums below 2^-126.
// Column tiles are split across OpenMP threads unless the call is already inside a
// parallel region; the summation order depends only on the shapes.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "tessera/tensor/cpu/avx512_tiles.h"
#include "tessera/tensor/cpu/bf16_gemm.h"

#if TESSERA_X86_KERNELS

TESSERA_AVX512_BF16_BEGIN

namespace tessera::cpu::avx512::bf16 {

namespace {

inline __m512 widen(__m256i bits) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16)); }

// BFloat16(float) on 16 lanes: add 0x7fff plus the kept part's lowest bit, keep the upper
// half; a NaN keeps its upper half with the quiet bit set.
inline __m256i round_to_bf16(__m512 value) {
  const __m512i bits = _mm512_castps_si512(value);
  const __m512i upper = _mm512_srli_epi32(bits, 16);
  const __m512i lowest = _mm512_and_si512(upper, _mm512_set1_epi32(1));
  __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lowest, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q);
  rounded = _mm512_mask_or_epi32(rounded, nan, upper, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(rounded);
}

// acc[r][v] = sum over pairs p of the two products of A word [p][r] with B word [p][16v + lane].
template <int kVectors>
inline void dot_pairs_tile(const uint32_t* a_panel, const uint32_t* b_panel, int64_t pairs, __m512 (&acc)[kRows][3]) {
#pragma GCC unroll 8
  for (int64_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 3
    for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh column[kVectors];
#pragma GCC unroll 3
    for (int v = 0; v < kVectors; ++v) {
      column[v] = (__m512bh)_mm512_loadu_si512(b_panel + p * kColumns + v * kLanes);
    }
    const uint32_t* words = a_panel + p * kRows;
#pragma GCC unroll 8
    for (int64_t r = 0; r < kRows; ++r) {
      const __m512bh weight = (__m512bh)_mm512_set1_epi32(static_cast<int>(words[r]));
#pragma GCC unroll 3
      for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], weight, column[v]);
    }
  }
}

}  // namespace

// C's column tile n0 for every row tile of a depth block: tile sums from the packed A
// panels and B panel, then, by the block's place in the depth: the first block starts from
// beta C (bfloat16 C, read widened), later ones from the float32 sums in `partial`; the
// last block scales by alpha (the sum of this and earlier blocks), rounds and stores
// bfloat16, others store float32 into `partial` (ldc's layout).
void column_tile(int64_t m, int64_t n, int64_t n0, int64_t pairs, const uint32_t* packed_a, const uint32_t* b_panel,
                 bool first, bool last, float alpha, float beta, float* partial, uint16_t* c, int64_t ldc) {
  const int64_t row_tiles = round_up(m, kRows) / kRows;
  const int64_t columns = std::min(kColumns, n - n0);
  const int vectors = static_cast<int>((columns + kLanes - 1) / kLanes);
  for (int64_t rt = 0; rt < row_tiles; ++rt) {
    __m512 acc[kRows][3];
    const uint32_t* a_panel = packed_a + rt * pairs * kRows;
    if (vectors == 3) {
      dot_pairs_tile<3>(a_panel, b_panel, pairs, acc);
    } else if (vectors == 2) {
      dot_pairs_tile<2>(a_panel, b_panel, pairs, acc);
    } else {
      dot_pairs_tile<1>(a_panel, b_panel, pairs, acc);
    }
    for (int64_t r = 0; r < kRows && rt * kRows + r < m; ++r) {
      const int64_t row = (rt * kRows + r) * ldc + n0;
      for (int v = 0; v < vectors; ++v) {
        const __mmask16 mask = lanes_below(columns - v * kLanes);
        const int64_t at = row + v * kLanes;
        __m512 value = acc[r][v];
        if (!first) value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(mask, partial + at));
        if (last && alpha != 1.0f) value = _mm512_mul_ps(_mm512_set1_ps(alpha), value);
        if (first && beta != 0.0f) {
          const __m512 old = widen(_mm256_maskz_loadu_epi16(mask, c + at));
          // Only the last block may scale by alpha, so an earlier one adds beta C / alpha.
          value = _mm512_fmadd_ps(_mm512_set1_ps(last ? beta : beta / alpha), old, value);
        }
        if (last) {
          _mm256_mask_storeu_epi16(c + at, mask, round_to_bf16(value));
        } else {
          _mm512_mask_storeu_ps(partial + at, mask, value);
        }
      }
    }
  }
}

}  // namespace tessera::cpu::avx512::bf16

TESSERA_AVX512_BF16_END

namespace tessera::cpu {

namespace {

using avx512::kColumns, avx512::kRows;

// k per block: 1024 pairs, a B panel of 192 KiB that stays in L2 while it passes over every
// row tile. Whole depths (GPT-2's 768 and 3072 up to 2048) then need no float32 partial sums
// between blocks: 1.7x faster than sgemm.cpp's 256-deep blocks of 1024 rows (2048 x 768 x
// 3072, one Zen 5 core: 333 against 193 GFLOP/s), whose partial C went to memory and back
// per block.
constexpr int64_t kDepth = 2048;
constexpr int64_t kParallelWork = int64_t{1} << 20;  // multiply-adds below which one thread runs

uint32_t word(uint16_t even, uint16_t odd) { return uint32_t{even} | (uint32_t{odd} << 16); }

// Rows row0 .. row0 + rows of A over depth k0 .. k0 + depth into 8-row panels of pair
// words, split across the enclosing region's threads. A[i, kk] = a[i * lda + kk], or
// a[kk * lda + i] when trans_a.
void pack_a(bool trans_a, int64_t m, int64_t row0, int64_t rows, int64_t k0, int64_t depth, const uint16_t* a,
            int64_t lda, uint32_t* packed) {
  const int64_t pairs = (depth + 1) / 2;
#pragma omp for schedule(static)
  for (int64_t rt = 0; rt < rows / kRows; ++rt) {
    uint32_t* panel = packed + rt * pairs * kRows;
    for (int64_t r = 0; r < kRows; ++r) {
      const int64_t i = row0 + rt * kRows + r;
      for (int64_t p = 0; p < pairs; ++p) {
        const int64_t kk = k0 + 2 * p;
        uint16_t even = 0, odd = 0;
        if (i < m) {
          even = trans_a ? a[kk * lda + i] : a[i * lda + kk];
          if (2 * p + 1 < depth) odd = trans_a ? a[(kk + 1) * lda + i] : a[i * lda + kk + 1];
        }
        panel[p * kRows + r] = word(even, odd);
      }
    }
  }
}

// Columns n0 .. n0 + 47 of B over depth k0 .. k0 + depth into a [pairs, 48] panel of pair
// words, zero past n. B[kk, j] = b[kk * ldb + j], or b[j * ldb + kk] when trans_b.
void pack_b(bool trans_b, int64_t n, int64_t n0, int64_t k0, int64_t depth, const uint16_t* b, int64_t ldb,
            uint32_t* panel) {
  const int64_t pairs = (depth + 1) / 2;
  const int64_t columns = std::min(kColumns, n - n0);
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t kk = k0 + 2 * p;
    const bool has_odd = 2 * p + 1 < depth;
    uint32_t* out = panel + p * kColumns;
    if (trans_b) {
      for (int64_t j = 0; j < columns; ++j) {
        const uint16_t* column = b + (n0 + j) * ldb + kk;
        out[j] = word(column[0], has_odd ? column[1] : 0);
      }
    } else {
      const uint16_t* even = b + kk * ldb + n0;
      const uint16_t* odd = even + ldb;
      for (int64_t j = 0; j < columns; ++j) out[j] = word(even[j], has_odd ? odd[j] : 0);
    }
    std::fill(out + columns, out + kColumns, 0u);
  }
}

}  // namespace

bool gemm_bf16_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                      int64_t lda, const uint16_t* b, int64_t ldb, float beta, uint16_t* c, int64_t ldc) {
  if (m == 0 || n == 0 || k == 0 || alpha == 0.0f) return false;  // the portable path's cases
  const int64_t rows = round_up(m, kRows);
  const int64_t column_tiles = round_up(n, kColumns) / kColumns;
  const int64_t max_pairs = (std::min(k, kDepth) + 1) / 2;
  thread_local Scratch packed_buffer, partial_buffer;
  // Every row of A for one depth block (as many bytes as that part of A, read from L3).
  auto* packed = reinterpret_cast<uint32_t*>(packed_buffer.get(rows * max_pairs));
  // Sums carried from one depth block to the next, in C's layout.
  float* partial = k > kDepth ? partial_buffer.get(m * ldc) : nullptr;
  const bool parallel = !omp_in_parallel() && m * n * k >= kParallelWork;

  // As sgemm.cpp's outer products: every thread walks the same depth blocks, packs its share
  // of the block's A panels, waits at the omp for's barrier, then multiplies its share of
  // column tiles.
#pragma omp parallel if (parallel)
  {
    thread_local Scratch b_panel_buffer;
    auto* b_panel = reinterpret_cast<uint32_t*>(b_panel_buffer.get(max_pairs * kColumns));
    for (int64_t k0 = 0; k0 < k; k0 += kDepth) {
      const int64_t depth = std::min(kDepth, k - k0);
      const int64_t pairs = (depth + 1) / 2;
      pack_a(trans_a, m, 0, rows, k0, depth, a, lda, packed);
#pragma omp for schedule(static)
      for (int64_t ct = 0; ct < column_tiles; ++ct) {
        const int64_t n0 = ct * kColumns;
        pack_b(trans_b, n, n0, k0, depth, b, ldb, b_panel);
        avx512::bf16::column_tile(m, n, n0, pairs, packed, b_panel, k0 == 0, k0 + depth >= k, alpha, beta, partial, c,
                                  ldc);
      }
    }
  }
  return true;
}

}  // namespace tessera::cpu

#endif  // TESSERA_X86_KERNELS
