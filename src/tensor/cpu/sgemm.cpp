// float32 GEMM with the AVX-512 register tiles of avx512_tiles.h.
//
// C = alpha op(A) op(B) + beta C, row-major. Two shapes of loop, chosen by where B's
// elements are contiguous:
//  - B not transposed (B[k, n] rows run along n): outer products. A is packed in 8-row
//    panels (alpha folded in), 48 columns per tile; depth is blocked by 256 and rows by
//    1024 (the packed block stays in L2). B's rows are read in place for a single row
//    tile, else copied per column tile into a contiguous panel that stays in L1/L2 across
//    the row tiles.
//  - B transposed (B stored [n, k], the layout of a Linear weight): dot products along k,
//    4 rows of A x 3 rows of B per tile, depth blocked by 1024 so the A block stays in L2.
//    When A's block is larger than 512 KiB (GPT-2's 256- and 2048-token batches), the
//    outer products instead, with B's panels packed as a transpose (8 x 8 transposes).
// Column tiles (or B-row tiles) are split across OpenMP threads unless the call is already
// inside a parallel region (the convolution's per-sample GEMMs). The summation order is
// fixed by the shapes and the thread count, so results are reproducible run to run.
// Threading and packing are portable code; each tile's arithmetic is an AVX-512 function
// (isa.h's pattern).
#include "tessera/tensor/cpu/sgemm.h"

#include <omp.h>

#include <algorithm>

#include "tessera/tensor/cpu/avx512_tiles.h"

#if TESSERA_X86_KERNELS

TESSERA_AVX512_BEGIN

namespace tessera::cpu::avx512 {

namespace {

// C's column tile n0 (48 columns) for every row tile, from a depth block of packed A panels
// and B's rows (row kk at b_tile + offsets[kk], in place or in a packed panel); `masked`:
// lanes at or past limits[kk] - n0 read zero (in place, the last column tile); `first`
// says whether this is the first depth block (beta applies) or a later one (add to C).
void outer_product_column_tile(int64_t m, int64_t n, int64_t n0, int64_t depth, const float* packed,
                               const float* b_tile, const int64_t* offsets, const int64_t* limits, bool masked,
                               bool first, float beta, float* c, int64_t ldc) {
  const int64_t row_tiles = round_up(m, kRows) / kRows;
  for (int64_t rt = 0; rt < row_tiles; ++rt) {
    __m512 acc[kRows][3];
    gemm_tile_for(std::min(kColumns, n - n0), masked, packed + rt * depth * kRows, b_tile, offsets, limits, n0, depth,
                  acc);
    for (int64_t r = 0; r < kRows && rt * kRows + r < m; ++r) {
      float* row = c + (rt * kRows + r) * ldc + n0;
      for (int v = 0; v < 3; ++v) {
        const __mmask16 mask = lanes_below(n - n0 - v * kLanes);
        if (mask == 0) break;
        __m512 value = acc[r][v];
        if (!first) {
          value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(mask, row + v * kLanes));
        } else if (beta != 0.0f) {
          value = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(mask, row + v * kLanes), value);
        }
        _mm512_mask_storeu_ps(row + v * kLanes, mask, value);
      }
    }
  }
}

// C[i, j0..j0+2] for every row i from the dot products of A's rows with B's rows j0..j0+2
// over one depth block (a points at its first column, b_rows at each B row's), 4 rows of A
// at a time. Rows past the ends repeat the last one; their sums are not stored.
void dot_product_b_tile(int64_t m, int64_t n, int64_t j0, int64_t depth, float alpha, const float* a, int64_t lda,
                        const float* const* b_rows, bool first, float beta, float* c, int64_t ldc) {
  const int64_t vectors = round_up(depth, kLanes) / kLanes;
  const __mmask16 tail = lanes_below(depth - (vectors - 1) * kLanes);
  for (int64_t i0 = 0; i0 < m; i0 += 4) {
    const float* a_rows[4];
    for (int i = 0; i < 4; ++i) a_rows[i] = a + std::min(i0 + i, m - 1) * lda;
    __m512 acc[16];  // acc[j * 4 + i]; the last four stay zero
    for (auto& value : acc) value = _mm512_setzero_ps();
    for (int64_t s = 0; s + 1 < vectors; ++s) {
      __m512 bv[3];
      for (int j = 0; j < 3; ++j) bv[j] = in_register(_mm512_loadu_ps(b_rows[j] + s * kLanes));
      for (int i = 0; i < 4; ++i) {
        const __m512 av = in_register(_mm512_loadu_ps(a_rows[i] + s * kLanes));
        for (int j = 0; j < 3; ++j) acc[j * 4 + i] = _mm512_fmadd_ps(av, bv[j], acc[j * 4 + i]);
      }
    }
    {  // the last vector, partly past the block's depth
      const int64_t s = vectors - 1;
      __m512 bv[3];
      for (int j = 0; j < 3; ++j) bv[j] = _mm512_maskz_loadu_ps(tail, b_rows[j] + s * kLanes);
      for (int i = 0; i < 4; ++i) {
        const __m512 av = _mm512_maskz_loadu_ps(tail, a_rows[i] + s * kLanes);
        for (int j = 0; j < 3; ++j) acc[j * 4 + i] = _mm512_fmadd_ps(av, bv[j], acc[j * 4 + i]);
      }
    }
    alignas(64) float sums[16];
    _mm512_store_ps(sums, sum_each16(acc));
    for (int j = 0; j < 3 && j0 + j < n; ++j) {
      for (int i = 0; i < 4 && i0 + i < m; ++i) {
        float& out = c[(i0 + i) * ldc + j0 + j];
        const float value = alpha * sums[j * 4 + i];
        out = !first ? out + value : beta != 0.0f ? value + beta * out : value;
      }
    }
  }
}

// dst row j (8 floats, dst_stride apart) = column j of the 8 x 8 block whose row i is
// rows[i]: the unpack/shuffle/permute transpose.
inline void store_transposed8(const __m256 (&rows)[8], float* dst, int64_t dst_stride) {
  __m256 pairs[8], quads[8];
  for (int i = 0; i < 4; ++i) {
    pairs[2 * i] = _mm256_unpacklo_ps(rows[2 * i], rows[2 * i + 1]);
    pairs[2 * i + 1] = _mm256_unpackhi_ps(rows[2 * i], rows[2 * i + 1]);
  }
  for (int half = 0; half < 2; ++half) {
    const __m256* p = pairs + 4 * half;
    quads[4 * half + 0] = _mm256_shuffle_ps(p[0], p[2], _MM_SHUFFLE(1, 0, 1, 0));
    quads[4 * half + 1] = _mm256_shuffle_ps(p[0], p[2], _MM_SHUFFLE(3, 2, 3, 2));
    quads[4 * half + 2] = _mm256_shuffle_ps(p[1], p[3], _MM_SHUFFLE(1, 0, 1, 0));
    quads[4 * half + 3] = _mm256_shuffle_ps(p[1], p[3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int j = 0; j < 4; ++j) {
    _mm256_storeu_ps(dst + j * dst_stride, _mm256_permute2f128_ps(quads[j], quads[4 + j], 0x20));
    _mm256_storeu_ps(dst + (j + 4) * dst_stride, _mm256_permute2f128_ps(quads[j], quads[4 + j], 0x31));
  }
}

}  // namespace

// panel[kk * panel_stride + r] = scale * source[r * stride + kk] for r < 8, kk < depth
// (zero for rows r >= valid): an 8-row tile of A in the outer products' layout
// (panel_stride 8), or 8 rows of a transposed B into its 48-column panel (scale 1,
// panel_stride 48).
void pack_transposed_rows(int64_t valid, const float* source, int64_t stride, int64_t depth, float scale, float* panel,
                          int64_t panel_stride) {
  const __m256 factor = _mm256_set1_ps(scale);
  int64_t kk = 0;
  for (; kk + 8 <= depth; kk += 8) {
    __m256 rows[8];
    for (int r = 0; r < 8; ++r) {
      rows[r] = r < valid ? _mm256_mul_ps(factor, _mm256_loadu_ps(source + r * stride + kk)) : _mm256_setzero_ps();
    }
    store_transposed8(rows, panel + kk * panel_stride, panel_stride);
  }
  for (; kk < depth; ++kk) {
    for (int64_t r = 0; r < 8; ++r) panel[kk * panel_stride + r] = r < valid ? scale * source[r * stride + kk] : 0.0f;
  }
}

}  // namespace tessera::cpu::avx512

TESSERA_AVX512_END

namespace tessera::cpu {

namespace {

using avx512::kColumns, avx512::kRows;

constexpr int64_t kOuterDepth = 256;
constexpr int64_t kOuterRowBlock = 1024;
constexpr int64_t kDotDepth = 1024;
// The dot-product path reads A's depth block in place, 4 rows per tile, from L2; past this
// size (128 rows at a depth past 1024, 256 rows past 512) the outer products with B
// transposed into their panels are faster (1.4x at 256 rows, 3x at 2048 rows, where A's
// block comes from L3). MNIST's 64-row batches stay below it.
constexpr int64_t kDotMaxABlockBytes = int64_t{1} << 19;
// Below this many multiply-adds a GEMM runs on one thread.
constexpr int64_t kParallelWork = int64_t{1} << 20;

bool run_parallel(int64_t m, int64_t n, int64_t k) { return !omp_in_parallel() && m * n * k >= kParallelWork; }

// Packs rows row0.. of A (alpha folded in) for depth block k0..k0+depth into 8-row panels,
// row tile by row tile (rows past m read zero), split across the enclosing region's threads.
void pack_a_rows(bool trans_a, int64_t m, int64_t row0, int64_t rows, int64_t k0, int64_t depth, float alpha,
                 const float* a, int64_t lda, float* packed) {
#pragma omp for schedule(static)
  for (int64_t rt = 0; rt < rows / kRows; ++rt) {
    float* panel = packed + rt * depth * kRows;
    const int64_t first = row0 + rt * kRows;
    if (trans_a) {  // A's column `row` runs down A^T's storage rows: read 8 neighbours at a time
      for (int64_t kk = 0; kk < depth; ++kk) {
        const float* source = a + (k0 + kk) * lda;
        for (int64_t r = 0; r < kRows; ++r) panel[kk * kRows + r] = first + r >= m ? 0.0f : alpha * source[first + r];
      }
    } else {
      avx512::pack_transposed_rows(std::min(kRows, m - first), a + first * lda + k0, lda, depth, alpha, panel, kRows);
    }
  }
}

// Copies B's columns n0..n0+47 over depth block k0.. into a [depth, 48] panel, zero past n;
// B stored [k, n] (rows read in place) or, trans_b, [n, k] (a transpose).
void pack_b_panel(bool trans_b, int64_t n, int64_t n0, int64_t k0, int64_t depth, const float* b, int64_t ldb,
                  float* panel) {
  const int64_t columns = std::min(kColumns, n - n0);
  if (trans_b) {  // 8 columns at a time (8 rows of the stored B), zero past n
    for (int64_t j0 = 0; j0 < kColumns; j0 += 8) {
      avx512::pack_transposed_rows(std::max<int64_t>(0, std::min<int64_t>(8, columns - j0)),
                                   b + std::min(n0 + j0, n - 1) * ldb + k0, ldb, depth, 1.0f, panel + j0, kColumns);
    }
    return;
  }
  for (int64_t kk = 0; kk < depth; ++kk) {
    const float* row = b + (k0 + kk) * ldb + n0;
    float* panel_row = panel + kk * kColumns;
    std::copy(row, row + columns, panel_row);
    std::fill(panel_row + columns, panel_row + kColumns, 0.0f);
  }
}

void outer_product_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                        int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const int64_t row_tiles = round_up(m, kRows) / kRows;
  const int64_t column_tiles = round_up(n, kColumns) / kColumns;
  // Rows are taken kOuterRowBlock at a time so that the block's packed A (1 MiB at depth
  // 256, half of this Xeon's L2) stays in L2 while every column tile passes over it; a
  // 2048-row A (GPT-2 at 8 x 256 tokens) would not, and would stream from L3.
  const int64_t block_rows = std::min(row_tiles * kRows, kOuterRowBlock);
  thread_local Scratch packed_buffer;
  float* packed = packed_buffer.get(block_rows * std::min(k, kOuterDepth));
  // With more than one row tile, each thread copies its column tile's B rows into one
  // contiguous panel first: B's rows are often a multiple of 4 KiB apart (a Linear weight
  // of 9216 columns, a 2048-wide matrix), so read in place they all fall in the same few
  // L1 sets and every row tile would fetch them again from L2. A transposed B is always
  // packed. The sums are the same either way.
  const bool pack_b = row_tiles > 1 || trans_b;

  // Every thread walks the same depth blocks and row blocks: pack its share of the block's
  // row tiles, wait for the others (the barrier after each omp for), then multiply its
  // share of column tiles. The order of the sums depends on neither blocking.
#pragma omp parallel if (run_parallel(m, n, k))
  {
    int64_t offsets[kOuterDepth], limits[kOuterDepth], panel_offsets[kOuterDepth];
    for (int64_t kk = 0; kk < kOuterDepth; ++kk) panel_offsets[kk] = kk * kColumns;
    thread_local Scratch b_panel_buffer;
    float* b_panel = pack_b ? b_panel_buffer.get(kOuterDepth * kColumns) : nullptr;
    for (int64_t k0 = 0; k0 < k; k0 += kOuterDepth) {
      const int64_t depth = std::min(kOuterDepth, k - k0);
      for (int64_t kk = 0; kk < depth; ++kk) {
        offsets[kk] = (k0 + kk) * ldb;
        limits[kk] = n;
      }
      for (int64_t row0 = 0; row0 < m; row0 += block_rows) {
        const int64_t rows = std::min(block_rows, round_up(m - row0, kRows));
        pack_a_rows(trans_a, m, row0, rows, k0, depth, alpha, a, lda, packed);
        float* c_block = c + row0 * ldc;
        const int64_t m_block = std::min(rows, m - row0);
#pragma omp for schedule(static)
        for (int64_t ct = 0; ct < column_tiles; ++ct) {
          const int64_t n0 = ct * kColumns;
          if (pack_b) {
            pack_b_panel(trans_b, n, n0, k0, depth, b, ldb, b_panel);
            avx512::outer_product_column_tile(m_block, n, n0, depth, packed, b_panel, panel_offsets, nullptr, false,
                                              k0 == 0, beta, c_block, ldc);
          } else {
            avx512::outer_product_column_tile(m_block, n, n0, depth, packed, b + n0, offsets, limits,
                                              n0 + kColumns > n, k0 == 0, beta, c_block, ldc);
          }
        }
      }
    }
  }
}

// C[i, j] = alpha sum_k A[i, k] B[j, k] + beta C[i, j]; A and B rows run along k, read in
// place, 4 rows of A x 3 rows of B per tile. Seven rows: rows of a Linear input or weight
// are often exactly a multiple of 4 KiB apart (9216 floats) and so share one L1 set,
// which has 8 ways; a tile that read 11 of them would thrash it.
void dot_product_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
                      int64_t ldb, float beta, float* c, int64_t ldc) {
  const int64_t b_tiles = (n + 2) / 3;
#pragma omp parallel if (run_parallel(m, n, k))
  {
    for (int64_t k0 = 0; k0 < k; k0 += kDotDepth) {
      const int64_t depth = std::min(kDotDepth, k - k0);
#pragma omp for schedule(static)
      for (int64_t jt = 0; jt < b_tiles; ++jt) {
        const int64_t j0 = jt * 3;
        const float* b_rows[3];
        for (int j = 0; j < 3; ++j) b_rows[j] = b + std::min(j0 + j, n - 1) * ldb + k0;
        avx512::dot_product_b_tile(m, n, j0, depth, alpha, a + k0, lda, b_rows, k0 == 0, beta, c, ldc);
      }
    }
  }
}

}  // namespace

bool sgemm_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0 || k == 0) return false;  // Eigen's path handles the degenerate cases
  if (!trans_b) {
    if (n < 32) return false;  // a 48-column tile would be mostly empty
    outer_product_gemm(trans_a, false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return true;
  }
  if (n >= 32 && m * std::min(k, kDotDepth) * int64_t{sizeof(float)} > kDotMaxABlockBytes) {
    outer_product_gemm(trans_a, true, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return true;
  }
  if (trans_a || k < 64) return false;
  dot_product_gemm(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  return true;
}

}  // namespace tessera::cpu

#endif  // TESSERA_X86_KERNELS
