// Shifted-row direct convolution (see conv_shifted.h for the idea).
//
// Register tiles (avx512_tiles.h): the forward and the input gradient share the 8 x 48
// outer-product tile (the forward's B rows are shifted image rows, the input gradient's
// the wide dY rows); the weight gradient is an 8 x 3 block of dot products over
// positions, folded into 24 sums at once.
//
// Threading and packing are portable code here; the per-sample arithmetic is the AVX-512
// functions of namespace avx512 below (isa.h's pattern).
//
// Memory: the weights are repacked once per call (tens of KB); each thread keeps a
// zero-padded wide copy of one sample's dY and its own weight-gradient sums in scratch
// that only grows, so a training step allocates nothing here after the first.
#include "tessera/tensor/cpu/conv_shifted.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "tessera/tensor/cpu/avx512_tiles.h"

#if TESSERA_X86_KERNELS

namespace tessera::cpu::shifted {

struct Layout {
  int64_t C, H, W, O, KH, KW, OH, OW;
  int64_t HW, P;      // input plane size; wide output positions OH * W
  int64_t taps;       // KH * KW
  int64_t max_shift;  // (KH - 1) * W + KW - 1
  explicit Layout(const Geometry& g)
      : C(g.channels), H(g.height), W(g.width), O(g.out_channels), KH(g.kernel_h), KW(g.kernel_w),
        OH(g.out_h()), OW(g.out_w()), HW(H * W), P(OH * W), taps(KH * KW), max_shift((KH - 1) * W + KW - 1) {}
  int64_t shift(int64_t tap) const { return (tap / KW) * W + tap % KW; }
  // The backward's wide dY rows: zeros before each row, then the wide grid padded to a tile.
  int64_t front() const { return round_up(max_shift, avx512::kLanes); }
  int64_t row_length() const { return front() + round_up(HW, avx512::kColumns); }
};

}  // namespace tessera::cpu::shifted

TESSERA_AVX512_BEGIN

namespace tessera::cpu::avx512 {

using shifted::Layout;

namespace {

constexpr int64_t kDepthBlock = 64;  // the forward's depth blocks (c, tap), see below

// One sample of the forward: y[O, OH, OW] from x[C, H, W] and the packed weights.
void shifted_forward_sample(const Layout& l, const float* packed, const int64_t* offsets, const int64_t* limits,
                            const float* bias, const float* x, float* y) {
  const int64_t depth = l.C * l.taps;
  const int64_t row_tiles = round_up(l.O, kRows) / kRows;
  const int64_t column_tiles = round_up(l.P, kColumns) / kColumns;
  for (int64_t ct = 0; ct < column_tiles; ++ct) {
    const int64_t p0 = ct * kColumns;
    const bool safe = p0 + kColumns <= l.P && p0 + kColumns + l.max_shift <= l.HW;
    // Which lanes are real outputs (column < OW), and where their run starts in y.
    __mmask16 keep[3];
    int64_t destination[3];
    for (int v = 0; v < 3; ++v) {
      const int64_t first = p0 + v * kLanes;
      uint32_t bits = 0;
      for (int64_t lane = 0; lane < kLanes; ++lane) {
        const int64_t p = first + lane;
        if (p < l.P && p % l.W < l.OW) bits |= 1u << lane;
      }
      keep[v] = static_cast<__mmask16>(bits);
      destination[v] = (first / l.W) * l.OW + std::min(first % l.W, l.OW);
    }
    for (int64_t rt = 0; rt < row_tiles; ++rt) {
      // Summed in blocks of kDepthBlock terms, then the blocks' sums added: float32 error
      // grows with the longest run of additions, so this is about twice as accurate as one
      // run over the whole depth (288 terms for the MNIST conv2) at the cost of a few loads.
      __m512 acc[kRows][3];
      const float* a = packed + rt * depth * kRows;
      const int64_t columns = std::min(kColumns, l.P - p0);
      gemm_tile_for(columns, !safe, a, x + p0, offsets, limits, p0, std::min(depth, kDepthBlock), acc);
      for (int64_t k0 = kDepthBlock; k0 < depth; k0 += kDepthBlock) {
        __m512 block[kRows][3];
        gemm_tile_for(columns, !safe, a + k0 * kRows, x + p0, offsets + k0, limits + k0, p0,
                      std::min(depth - k0, kDepthBlock), block);
        for (int64_t r = 0; r < kRows; ++r) {
          for (int v = 0; v < 3; ++v) acc[r][v] = _mm512_add_ps(acc[r][v], block[r][v]);
        }
      }
      for (int64_t r = 0; r < kRows; ++r) {
        const int64_t o = rt * kRows + r;
        if (o >= l.O) break;
        const __m512 b = _mm512_set1_ps(bias != nullptr ? bias[o] : 0.0f);
        float* yo = y + o * l.OH * l.OW;
        for (int v = 0; v < 3; ++v) {
          if (keep[v] == 0) continue;
          const __m512 value = _mm512_maskz_compress_ps(keep[v], _mm512_add_ps(acc[r][v], b));
          _mm512_mask_storeu_ps(yo + destination[v], lanes_below(__builtin_popcount(keep[v])), value);
        }
      }
    }
  }
}

// One sample's dY laid out on the wide grid (rows of row_length, zero elsewhere), and its
// bias-gradient sums added into db_sum.
void shifted_widen_grad(const Layout& l, const float* dy, float* wide, float* db_sum) {
  const int64_t front = l.front(), row_length = l.row_length();
  for (int64_t o = 0; o < l.O; ++o) {
    float* row = wide + o * row_length + front;
    const float* source = dy + o * l.OH * l.OW;
    __m512 total = _mm512_setzero_ps();
    for (int64_t oy = 0; oy < l.OH; ++oy) {
      for (int64_t ox = 0; ox < l.OW; ox += kLanes) {
        const __mmask16 mask = lanes_below(l.OW - ox);
        const __m512 value = _mm512_maskz_loadu_ps(mask, source + oy * l.OW + ox);
        _mm512_mask_storeu_ps(row + oy * l.W + ox, mask, value);
        total = _mm512_add_ps(total, value);
      }
    }
    db_sum[o] += _mm512_reduce_add_ps(total);
  }
}

// dX of one sample: the patch gradient dcol[(c, tap), p] = sum_o W[o, c, tap] dY_wide[o, p]
// (a GEMM of depth O whose B rows, the wide dY rows, are aligned), each tile added straight
// into plane c shifted by shift(tap) (col2im on the wide grid).
void shifted_input_grad_sample(const Layout& l, const float* packed, const int64_t* offsets, const float* wide,
                               float* dx) {
  const int64_t patch = l.C * l.taps;
  const int64_t patch_tiles = round_up(patch, kRows) / kRows;
  const int64_t column_tiles = round_up(l.P, kColumns) / kColumns;
  std::fill(dx, dx + l.C * l.HW, 0.0f);
  for (int64_t ct = 0; ct < column_tiles; ++ct) {
    const int64_t p0 = ct * kColumns;
    for (int64_t rt = 0; rt < patch_tiles; ++rt) {
      __m512 acc[kRows][3];
      gemm_tile_for(std::min(kColumns, l.P - p0), false, packed + rt * l.O * kRows, wide + p0, offsets, nullptr, 0, l.O,
                    acc);
      for (int64_t r = 0; r < kRows; ++r) {
        const int64_t k = rt * kRows + r;
        if (k >= patch) break;
        const int64_t shift = l.shift(k % l.taps);
        float* destination = dx + (k / l.taps) * l.HW + shift + p0;
        // Lanes past the wide grid or the plane hold exact zeros (dY_wide is zero
        // there) and are skipped, so nothing is written outside the plane.
        const int64_t count = std::min(l.P - p0, l.HW - shift - p0);
        for (int v = 0; v < 3 && v * kLanes < count; ++v) {
          const __mmask16 mask = lanes_below(count - v * kLanes);
          const __m512 sum = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, destination + v * kLanes), acc[r][v]);
          _mm512_mask_storeu_ps(destination + v * kLanes, mask, sum);
        }
      }
    }
  }
}

// dW[o, (c, tap)] += sum_p dY_wide[o, p] * X[c, shift(tap) + p] for one sample: 8 x 3 dot
// products at a time (8 aligned dY loads and 3 shifted X loads per 24 FMAs), summed into
// dw_sum, which is kept tap-major ([patch][O]) so that 8 sums land in one vector. Output
// channels outside, so the tile's 8 dY rows stay in L1 while the shifted X rows stream past.
void shifted_weight_grad_sample(const Layout& l, const float* wide, const float* x, float* dw_sum) {
  const int64_t patch = l.C * l.taps;
  const int64_t front = l.front(), row_length = l.row_length();
  const int64_t vectors = round_up(l.P, kLanes) / kLanes;  // dot-product length, in vectors
  for (int64_t o0 = 0; o0 < l.O; o0 += 8) {
    const float* dy_rows[8];
    for (int i = 0; i < 8; ++i) dy_rows[i] = wide + std::min(o0 + i, l.O - 1) * row_length + front;
    for (int64_t k0 = 0; k0 < patch; k0 += 3) {
      const float* x_rows[3];
      int64_t room[3];  // elements of the plane left from the row's start
      int64_t full = vectors;
      for (int j = 0; j < 3; ++j) {
        const int64_t k = std::min(k0 + j, patch - 1);
        const int64_t shift = l.shift(k % l.taps);
        x_rows[j] = x + (k / l.taps) * l.HW + shift;
        room[j] = l.HW - shift;
        full = std::min(full, room[j] / kLanes);
      }
      __m512 acc[24];  // acc[j * 8 + i]: output channel o0 + i, column k0 + j
      for (auto& value : acc) value = _mm512_setzero_ps();
      for (int64_t s = 0; s < vectors; ++s) {
        __m512 xv[3];
        if (s < full) {
          for (int j = 0; j < 3; ++j) xv[j] = _mm512_loadu_ps(x_rows[j] + s * kLanes);
        } else {  // the tail, where a shifted row would leave its plane
          for (int j = 0; j < 3; ++j) {
            xv[j] = _mm512_maskz_loadu_ps(lanes_below(room[j] - s * kLanes), x_rows[j] + s * kLanes);
          }
        }
        for (int i = 0; i < 8; ++i) {
          const __m512 d = in_register(_mm512_load_ps(dy_rows[i] + s * kLanes));
          for (int j = 0; j < 3; ++j) acc[j * 8 + i] = _mm512_fmadd_ps(d, xv[j], acc[j * 8 + i]);
        }
      }
      const __m512 first = sum_each16(acc);
      const __m256 third = sum_each8(acc + 16);
      const __mmask8 rows = static_cast<__mmask8>(lanes_below(l.O - o0));
      float* out = dw_sum + k0 * l.O + o0;
      _mm256_mask_storeu_ps(out, rows, _mm256_add_ps(_mm256_maskz_loadu_ps(rows, out), _mm512_castps512_ps256(first)));
      if (k0 + 1 < patch) {
        out += l.O;
        const __m256 second = _mm512_extractf32x8_ps(first, 1);
        _mm256_mask_storeu_ps(out, rows, _mm256_add_ps(_mm256_maskz_loadu_ps(rows, out), second));
      }
      if (k0 + 2 < patch) {
        out += l.O;
        _mm256_mask_storeu_ps(out, rows, _mm256_add_ps(_mm256_maskz_loadu_ps(rows, out), third));
      }
    }
  }
}

}  // namespace

}  // namespace tessera::cpu::avx512

TESSERA_AVX512_END

namespace tessera::cpu::shifted {

namespace {

using avx512::kRows;

// a[(tile * depth + k) * kRows + r] = source(tile * kRows + r, k), zero past `rows`.
template <class Source>
void pack_rows(int64_t rows, int64_t depth, float* a, Source source) {
  const int64_t tiles = round_up(rows, kRows) / kRows;
  for (int64_t tile = 0; tile < tiles; ++tile) {
    for (int64_t k = 0; k < depth; ++k) {
      for (int64_t r = 0; r < kRows; ++r) {
        const int64_t row = tile * kRows + r;
        a[(tile * depth + k) * kRows + r] = row < rows ? source(row, k) : 0.0f;
      }
    }
  }
}

}  // namespace

void forward(const Geometry& g, const float* x, const float* w, const float* bias, float* y) {
  const Layout l(g);
  const int64_t depth = l.C * l.taps;
  const int64_t row_tiles = round_up(l.O, kRows) / kRows;

  thread_local Scratch packed_buffer;
  thread_local std::vector<int64_t> table_buffer;
  float* packed = packed_buffer.get(row_tiles * depth * kRows);
  pack_rows(l.O, depth, packed, [&](int64_t o, int64_t k) { return w[o * depth + k]; });
  // Per k = (c, tap): where its shifted row starts, and where it must stop reading.
  table_buffer.resize(static_cast<size_t>(2 * depth));
  int64_t* offsets = table_buffer.data();
  int64_t* limits = offsets + depth;
  for (int64_t k = 0; k < depth; ++k) {
    const int64_t shift = l.shift(k % l.taps);
    offsets[k] = (k / l.taps) * l.HW + shift;
    limits[k] = std::min(l.P, l.HW - shift);
  }

#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.batch; ++n) {
    avx512::shifted_forward_sample(l, packed, offsets, limits, bias, x + n * l.C * l.HW, y + n * l.O * l.OH * l.OW);
  }
}

void backward(const Geometry& g, const float* dy, const float* x, const float* w, float* dx, float* dw, float* db) {
  const Layout l(g);
  const int64_t patch = l.C * l.taps;  // weight-gradient columns, (c, tap)
  const int64_t row_length = l.row_length();

  thread_local Scratch packed_buffer;
  thread_local std::vector<int64_t> offset_buffer;
  float* packed = nullptr;
  int64_t* offsets = nullptr;
  if (dx != nullptr) {
    packed = packed_buffer.get(round_up(patch, kRows) * l.O);
    pack_rows(patch, l.O, packed, [&](int64_t k, int64_t o) { return w[o * patch + k]; });
    offset_buffer.resize(static_cast<size_t>(l.O));
    offsets = offset_buffer.data();
    for (int64_t o = 0; o < l.O; ++o) offsets[o] = o * row_length + l.front();
  }

  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), std::max<int64_t>(g.batch, 1)));
  const int64_t partial_size = l.O * patch + l.O;  // dW sums, then dB sums
  thread_local Scratch partial_buffer;
  float* partials = partial_buffer.get(threads * partial_size);

#pragma omp parallel num_threads(threads)
  {
    thread_local Scratch wide_buffer;
    float* wide = wide_buffer.get(l.O * row_length);
    std::fill(wide, wide + l.O * row_length, 0.0f);  // pads and discarded columns stay zero
    float* dw_sum = partials + omp_get_thread_num() * partial_size;
    float* db_sum = dw_sum + l.O * patch;
    std::fill(dw_sum, dw_sum + partial_size, 0.0f);

#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.batch; ++n) {
      const float* xn = x + n * l.C * l.HW;
      // The wide dY of this sample, read once for all three gradients while it is in L2.
      avx512::shifted_widen_grad(l, dy + n * l.O * l.OH * l.OW, wide, db_sum);
      if (dx != nullptr) avx512::shifted_input_grad_sample(l, packed, offsets, wide, dx + n * l.C * l.HW);
      if (dw != nullptr) avx512::shifted_weight_grad_sample(l, wide, xn, dw_sum);
    }
  }

  // Sum the threads' partial gradients in a fixed order (the same result on every run).
  for (int64_t i = 0; i < l.O * patch; ++i) {
    if (dw == nullptr) break;
    float total = 0.0f;
    for (int t = 0; t < threads; ++t) total += partials[t * partial_size + i];
    const int64_t k = i / l.O, o = i % l.O;  // the partials are [patch][O]
    dw[o * patch + k] = total;
  }
  for (int64_t o = 0; o < l.O; ++o) {
    if (db == nullptr) break;
    float total = 0.0f;
    for (int t = 0; t < threads; ++t) total += partials[t * partial_size + l.O * patch + o];
    db[o] = total;
  }
}

}  // namespace tessera::cpu::shifted

#endif  // TESSERA_X86_KERNELS
