// Scaled dot-product attention on the CPU: the blocked online softmax of flash attention
// (Dao et al. 2022, with FlashAttention-2's loop order), the scheme PyTorch's CPU kernel uses.
//
// Shapes: q [N.., L, E], k [N.., S, E], v [N.., S, Ev]; every batch index n (the leading
// dims flattened, heads included) is an independent head. Operands are read in place
// wherever their last dim is contiguous (q/k/v taken from a transposed [B, T, H, D] view
// are), one row pointer per (n, row); otherwise they are copied first.
//
// Forward. Work items are (n, query block i of Bq rows). For each key block j of Bk keys,
// the block's scores S = scale Q_i K_j^T live in a [Bq, Bk] tile; the mask (boolean,
// additive or causal) is applied in place, then the online softmax: each row keeps its
// running maximum m and sum l of exp(s - m); a block that raises m first rescales l and the
// row's output accumulator by exp(m_old - m_new), then P = exp(S - m_new) and the output
// accumulates P V_j. At the end out = acc / l and lse = m + log l. Only lse ([N.., L]) is
// kept for the backward. No [L, S] matrix is ever stored: the memory is the inputs, the
// output, lse and one set of tiles per thread, O(N L) beyond the operands.
//
// Backward. D_i = rowsum(dO_i * O_i) first; then every visible tile (i, j) is recomputed
// from Q_i, K_j and lse: P = exp(S - lse), dV_j += P^T dO_i, dP = dO_i V_j^T,
// dS = P * (dP - D_i), dQ_i += scale dS K_j, dK_j += scale dS^T Q_i. With at least as many
// heads as threads, each thread owns whole heads and walks their tiles query block by query
// block. With fewer, one pass over (n, key block) computes dK and dV and a second pass over
// (n, query block) computes dQ (recomputing the tiles twice). Either way each gradient block
// adds the same tiles in the same order through the same GEMMs, so both give identical bits
// and the result does not depend on the thread count. There is no gradient for attn_mask.
//
// Dropout keeps weight (n, i, j) exactly when dropout() keeps element (n, i, j) of the
// weights tensor [N.., L, S] under the same DropoutKey (attention_geometry.h says where it
// sits; the bits are dropout_key.h's): P is multiplied by keep / (1 - p) before it meets V.
// The backward draws the same bits again, so recomputation (activation checkpointing) is
// exact. With Pd = P keep / (1 - p): dV_j += Pd^T dO_i, dS = Pd * dP - P * D_i, and
// D_i = rowsum(dO_i * O_i) still holds for the dropped output.
//
// A row with no key left (every key masked, or S = 0) has l = 0: its output is 0 and its
// lse -inf, as PyTorch >= 2.5's math path gives (its _safe_softmax; earlier versions give
// NaN); its gradients are 0. NaN scores are not mistaken for such a row: they reach the
// output, as in PyTorch.
//
// Arithmetic. The tiles' GEMMs are cpu::gemm (sgemm.cpp's AVX-512 tiles, chosen at run time
// where the CPU has them; Eigen or OpenBLAS otherwise), so there is no instruction-set code
// here: the softmax steps are plain loops written so that GCC vectorises them for the build's
// baseline (AVX2) — selects as bit masks, maxima as comparisons — with a Cephes-style exp in
// float32 (1.4 ulp) and std::exp in float64 (the gradient checks' dtype).
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "tessera/tensor/attention_geometry.h"
#include "tessera/tensor/cpu/gemm.h"
#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/dropout_key.h"

namespace tessera::cpu {

using namespace native;

namespace {

constexpr int64_t kQueryBlock = 64;
constexpr int64_t kKeyBlock = 256;
// Below this many multiply-adds (N L S (E + Ev)) the kernel runs on one thread.
constexpr int64_t kParallelWork = int64_t{1} << 18;

// a where `take`, else b, through bit masks: GCC 12 vectorises this for AVX2 as well as
// AVX-512, a ?: on floats only for AVX-512.
inline float select(bool take, float a, float b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(take);
  return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & mask) | (std::bit_cast<uint32_t>(b) & ~mask));
}
inline double select(bool take, double a, double b) { return take ? a : b; }

// e^x: 2^n e^r with n = round(x log2 e), |r| <= ln 2 / 2, e^r by Cephes's expf polynomial
// (at most 1.4 ulp from e^x, measured over [-87, 0.5]). Zero below -87.3, where e^x leaves
// float's normal range (so -inf gives 0); NaN stays NaN. No float-to-int conversion: n is
// read from the mantissa of x log2 e + 1.5 * 2^23, which rounds it.
inline float exp_of(float x) {
  const float clamped = select(x < -88.0f, -88.0f, x);
  const float shifted = clamped * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  const float r = (clamped - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float two_to_n = std::bit_cast<float>((std::bit_cast<uint32_t>(shifted) - 0x4B400000u + 127u) << 23);
  return select(x < -87.3f, 0.0f, p * two_to_n);
}
inline double exp_of(double x) { return std::exp(x); }

template <class T>
constexpr T kMinusInfinity = -std::numeric_limits<T>::infinity();

// A [N.., R, C] operand read by rows: row r of batch n starts at row(n, r), rows `ld` apart.
template <class T>
struct RowView {
  Tensor owner;  // keeps the bytes alive (a copy when the view's rows were not contiguous)
  const T* base = nullptr;
  std::vector<int64_t> offsets;  // per batch index
  int64_t ld = 0;
  const T* row(int64_t n, int64_t r) const { return base + offsets[n] + r * ld; }
};

// Element offsets of every batch index of `strides` (one per batch dim) over `batch_shape`.
std::vector<int64_t> batch_offsets(const Shape& batch_shape, const Shape& strides) {
  const int64_t batches = shape_numel(batch_shape);
  std::vector<int64_t> offsets(static_cast<size_t>(batches), 0);
  for (int64_t n = 0; n < batches; ++n) {
    int64_t rest = n, offset = 0;
    for (size_t d = batch_shape.size(); d-- > 0;) {
      offset += (rest % batch_shape[d]) * strides[d];
      rest /= batch_shape[d];
    }
    offsets[n] = offset;
  }
  return offsets;
}

template <class T>
RowView<T> row_view(const Tensor& t_in, const Shape& batch_shape) {
  const int64_t d = t_in.dim();
  const int64_t rows = t_in.size(d - 2), cols = t_in.size(d - 1);
  const bool unit_columns = t_in.stride(d - 1) == 1 || cols <= 1;
  const bool separate_rows = rows <= 1 || t_in.stride(d - 2) >= std::max<int64_t>(cols, 1);
  RowView<T> view;
  view.owner = unit_columns && separate_rows ? t_in : contiguous(t_in);
  const Tensor& t = view.owner;
  view.base = static_cast<const T*>(t.data_ptr());
  view.ld = rows <= 1 ? std::max<int64_t>(cols, 1) : t.stride(d - 2);
  view.offsets = batch_offsets(batch_shape, Shape(t.strides().begin(), t.strides().end() - 2));
  return view;
}

// The mask as the tiles read it: element (n, i, j) at offsets[n] + i * row_stride + j * col_stride.
template <class T>
struct MaskView {
  bool causal = false;
  const bool* keep = nullptr;  // boolean mask
  const T* add = nullptr;         // additive mask
  std::vector<int64_t> offsets;
  int64_t row_stride = 0, col_stride = 0;
};

template <class T>
MaskView<T> mask_view(const AttentionOptions& options, const AttentionGeometry& g) {
  MaskView<T> view;
  view.causal = options.is_causal;
  const Tensor& mask = options.attn_mask;
  if (!mask.defined()) return view;
  const Shape weights = g.weights_shape();
  const Shape strides = broadcast_strides(mask, weights);
  view.offsets = batch_offsets(g.batch_shape, Shape(strides.begin(), strides.end() - 2));
  view.row_stride = strides[strides.size() - 2];
  view.col_stride = strides.back();
  if (is_boolean_mask(mask.dtype())) {
    view.keep = static_cast<const bool*>(mask.data_ptr());
  } else {
    view.add = static_cast<const T*>(mask.data_ptr());
  }
  return view;
}

// Dropout's keep factors (1 kept, 0 dropped) for weights (n, i, j0 .. j0 + count): the bits
// of dropout()'s element (row, col) of the weights tensor, 16 Philox blocks (64 weights) at a
// time in a loop the compiler vectorises.
struct DropoutDraw {
  bool active = false;
  float p = 0;
  uint64_t philox_key = 0, step = 0;
  int64_t first_row = 0, cols = 0, queries = 0, keys = 0;

  template <class T>
  void keep_factors(int64_t n, int64_t i, int64_t j0, int64_t count, T* keep) const {
    const int64_t element = (n * queries + i) * keys + j0;
    const int64_t row = first_row + element / cols, first = element % cols;
    constexpr int kBlocks = 16;
    const uint64_t key = philox_key, counter_step = step;
    for (int64_t block0 = first / 4; block0 * 4 < first + count; block0 += kBlocks) {
      uint32_t words[4][kBlocks];
#pragma omp simd
      for (int b = 0; b < kBlocks; ++b) {
        const philox::Counter bits = dropout_bits(key, counter_step, row, block0 + b);
        words[0][b] = bits.word[0];
        words[1][b] = bits.word[1];
        words[2][b] = bits.word[2];
        words[3][b] = bits.word[3];
      }
      const int64_t begin = std::max(first, block0 * 4), end = std::min(first + count, (block0 + kBlocks) * 4);
      for (int64_t c = begin; c < end; ++c) {
        const int64_t b = c / 4 - block0;
        keep[c - first] = static_cast<T>(philox::unit_float(words[c % 4][b]) >= p);
      }
    }
  }
};

// Everything a tile needs, in one place.
template <class T>
struct Problem {
  AttentionGeometry g;
  T scale = 1;
  T keep_scale = 1;  // 1 / (1 - p), 0 when p = 1
  int64_t query_block = kQueryBlock, key_block = kKeyBlock;
  RowView<T> q, k, v;
  MaskView<T> mask;
  DropoutDraw dropout;

  int64_t query_blocks() const { return (g.queries + query_block - 1) / query_block; }
  int64_t key_blocks() const { return (g.keys + key_block - 1) / key_block; }
  int64_t rows_at(int64_t i0) const { return std::min(query_block, g.queries - i0); }
  // Whether any query of the block at i0 sees a key of the block at j0 (causal: j <= i).
  bool visible(int64_t i0, int64_t j0) const { return !mask.causal || j0 <= i0 + rows_at(i0) - 1; }
  // The keys of tile (i0, j0): the block, cut after the last key a causal block sees.
  int64_t cols_at(int64_t i0, int64_t j0) const {
    const int64_t cols = std::min(key_block, g.keys - j0);
    return mask.causal ? std::min(cols, i0 + rows_at(i0) - j0) : cols;
  }
  // Work for the parallel decision: every tile's multiply-adds.
  bool worth_threads() const {
    return !omp_in_parallel() && g.batches * g.queries * g.keys * (g.head_dim + g.value_dim) >= kParallelWork;
  }
};

template <class T>
Problem<T> make_problem(const AttentionOperands& operands) {
  const auto& [q, k, v, options, g] = operands;
  Problem<T> p;
  p.g = g;
  p.scale = static_cast<T>(options.scale);
  if (options.query_block > 0) p.query_block = options.query_block;
  if (options.key_block > 0) p.key_block = options.key_block;
  p.q = row_view<T>(q, g.batch_shape);
  p.k = row_view<T>(k, g.batch_shape);
  p.v = row_view<T>(v, g.batch_shape);
  p.mask = mask_view<T>(options, g);
  if (options.dropout_p > 0) {
    const double dropout_p = options.dropout_p;
    p.keep_scale = dropout_p < 1 ? static_cast<T>(1.0 / (1.0 - dropout_p)) : T(0);
    p.dropout = {.active = true,
                 .p = static_cast<float>(dropout_p),
                 .philox_key = dropout_philox_key(options.dropout_key),
                 .step = options.dropout_key.step,
                 .first_row = options.dropout_key.first_row,
                 .cols = g.dropout_cols(),
                 .queries = g.queries,
                 .keys = g.keys};
  }
  return p;
}

// dst[c * ld_dst + r] = src[r * ld_src + c] for r < rows, c < cols.
template <class T>
void transpose_into(const T* src, int64_t ld_src, int64_t rows, int64_t cols, T* dst, int64_t ld_dst) {
  constexpr int64_t kBlock = 16;
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      for (int64_t r = r0; r < std::min(r0 + kBlock, rows); ++r) {
        for (int64_t c = c0; c < std::min(c0 + kBlock, cols); ++c) dst[c * ld_dst + r] = src[r * ld_src + c];
      }
    }
  }
}

// One head's K^T [E, S] and V^T [Ev, S] (rows S apart), kept by a thread while it works on
// that head: the scores Q_i K_j^T and dP = dO_i V_j^T are then outer-product GEMMs along the
// keys (the long dimension), which the float32 tiles run about twice as fast as the dot
// products of K's own rows.
template <class T>
struct HeadTransposes {
  T* kt = nullptr;
  T* vt = nullptr;  // null where only K^T is needed (the forward)
  int64_t head = -1;

  void load(const Problem<T>& p, int64_t n) {
    if (n == head) return;
    const AttentionGeometry& g = p.g;
    transpose_into(p.k.row(n, 0), p.k.ld, g.keys, g.head_dim, kt, g.keys);
    if (vt != nullptr) transpose_into(p.v.row(n, 0), p.v.ld, g.keys, g.value_dim, vt, g.keys);
    head = n;
  }
};

// Masks one row of scores s[0, cols): query i, keys j0 .. j0 + cols.
template <class T>
void mask_row(const MaskView<T>& mask, int64_t n, int64_t i, int64_t j0, int64_t cols, T* s) {
  if (mask.causal) {
    for (int64_t j = std::clamp<int64_t>(i - j0 + 1, 0, cols); j < cols; ++j) s[j] = kMinusInfinity<T>;
  } else if (mask.keep != nullptr) {
    const bool* keep = mask.keep + mask.offsets[n] + i * mask.row_stride + j0 * mask.col_stride;
    for (int64_t j = 0; j < cols; ++j) s[j] = select(keep[j * mask.col_stride], s[j], kMinusInfinity<T>);
  } else if (mask.add != nullptr) {
    const T* add = mask.add + mask.offsets[n] + i * mask.row_stride + j0 * mask.col_stride;
    for (int64_t j = 0; j < cols; ++j) s[j] += add[j * mask.col_stride];
  }
}

// The scores tile scale * Q_i K_j^T of batch n (K^T from `heads`), masked; rows key_block apart.
template <class T>
void masked_scores(const Problem<T>& p, const HeadTransposes<T>& heads, int64_t n, int64_t i0, int64_t rows,
                   int64_t j0, int64_t cols, T* scores) {
  gemm<T>(false, false, rows, cols, p.g.head_dim, p.scale, p.q.row(n, i0), p.q.ld, heads.kt + j0, p.g.keys, T(0),
          scores, p.key_block);
  for (int64_t r = 0; r < rows; ++r) mask_row(p.mask, n, i0 + r, j0, cols, scores + r * p.key_block);
}

// Written as a comparison, not std::max: GCC turns this reduction into vector maxima for
// AVX2 and AVX-512 alike, std::max's form only for AVX-512.
template <class T>
T row_maximum(const T* s, int64_t cols) {
  T maximum = kMinusInfinity<T>;
#pragma omp simd reduction(max : maximum)
  for (int64_t j = 0; j < cols; ++j) maximum = s[j] > maximum ? s[j] : maximum;
  return maximum;
}

// s[j] = exp(s[j] - shift); returns their sum.
template <class T>
T exp_shifted(T* s, int64_t cols, T shift) {
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < cols; ++j) {
    const T e = exp_of(s[j] - shift);
    s[j] = e;
    sum += e;
  }
  return sum;
}

template <class T>
void scale_row(T* row, int64_t count, T factor) {
#pragma omp simd
  for (int64_t e = 0; e < count; ++e) row[e] *= factor;
}

// Per-thread scratch taken from the CPU allocator (so the memory counters see it), 64-byte
// aligned pieces of `count` elements each.
template <class T>
class Scratch {
 public:
  Scratch(int threads, std::initializer_list<int64_t> pieces) {
    for (int64_t count : pieces) {
      offsets_.push_back(per_thread_);
      per_thread_ += (count + 15) / 16 * 16;
    }
    buffer_ = empty({threads * per_thread_ + 16}, dtype_of<T>, Device::cpu());
    base_ = buffer_.data_ptr<T>();
    base_ += (64 - reinterpret_cast<uintptr_t>(base_) % 64) % 64 / sizeof(T);
  }
  T* piece(int thread, size_t index) const { return base_ + thread * per_thread_ + offsets_[index]; }

 private:
  Tensor buffer_;
  T* base_ = nullptr;
  std::vector<int64_t> offsets_;
  int64_t per_thread_ = 0;
};

// ---- Forward ----

template <class T>
struct ForwardScratch {
  T* scores;   // [query_block, key_block]
  T* row_max;  // [query_block]
  T* row_sum;  // [query_block]
  T* keep;     // [key_block]
  HeadTransposes<T> heads;
};

// Output rows [i0, i0 + rows) of batch n (accumulated in place, `out` is their first row)
// and their log-sum-exp.
template <class T>
void forward_block(const Problem<T>& p, ForwardScratch<T>& w, int64_t n, int64_t i0, T* out, T* lse) {
  const int64_t rows = p.rows_at(i0), value_dim = p.g.value_dim, bk = p.key_block;
  T* row_max = w.row_max;
  T* row_sum = w.row_sum;
  w.heads.load(p, n);
  std::fill(out, out + rows * value_dim, T(0));
  std::fill(row_max, row_max + rows, kMinusInfinity<T>);
  std::fill(row_sum, row_sum + rows, T(0));
  for (int64_t j0 = 0; j0 < p.g.keys && p.visible(i0, j0); j0 += bk) {
    const int64_t cols = p.cols_at(i0, j0);
    masked_scores(p, w.heads, n, i0, rows, j0, cols, w.scores);
    for (int64_t r = 0; r < rows; ++r) {
      T* s = w.scores + r * bk;
      const T new_max = std::max(row_max[r], row_maximum(s, cols));
      if (new_max == kMinusInfinity<T>) {  // no key of this row taken part yet, or only NaN scores
        if (std::any_of(s, s + cols, [](T x) { return std::isnan(x); })) {
          row_max[r] = row_sum[r] = std::numeric_limits<T>::quiet_NaN();  // NaN in, NaN out (as PyTorch)
        } else {
          std::fill(s, s + cols, T(0));
        }
        continue;
      }
      const T correction = exp_of(row_max[r] - new_max);  // 0 for the row's first keys
      const T sum = exp_shifted(s, cols, new_max);
      row_sum[r] = row_sum[r] * correction + sum;
      row_max[r] = new_max;
      if (correction != T(1)) scale_row(out + r * value_dim, value_dim, correction);
      if (p.dropout.active) {
        p.dropout.keep_factors(n, i0 + r, j0, cols, w.keep);
        const T* keep = w.keep;
#pragma omp simd
        for (int64_t j = 0; j < cols; ++j) s[j] *= keep[j];
      }
    }
    gemm<T>(false, false, rows, value_dim, cols, T(1), w.scores, bk, p.v.row(n, j0), p.v.ld, T(1), out, value_dim);
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (row_sum[r] == T(0)) {
      std::fill(out + r * value_dim, out + (r + 1) * value_dim, T(0));
      lse[r] = kMinusInfinity<T>;
    } else {
      scale_row(out + r * value_dim, value_dim, p.keep_scale / row_sum[r]);
      lse[r] = row_max[r] + std::log(row_sum[r]);
    }
  }
}

template <class T>
void forward(const Problem<T>& p, Tensor& output, Tensor& logsumexp) {
  const AttentionGeometry& g = p.g;
  T* out = output.data_ptr<T>();
  T* lse = logsumexp.data_ptr<T>();
  const int64_t q_blocks = p.query_blocks(), items = g.batches * q_blocks;
  const int threads = p.worth_threads() ? omp_get_max_threads() : 1;
  const Scratch<T> scratch(
      threads, {p.query_block * p.key_block, p.query_block, p.query_block, p.key_block, g.head_dim * g.keys});
#pragma omp parallel num_threads(threads)
  {
    const int thread = omp_get_thread_num();
    ForwardScratch<T> w{scratch.piece(thread, 0), scratch.piece(thread, 1), scratch.piece(thread, 2),
                        scratch.piece(thread, 3), {scratch.piece(thread, 4), nullptr}};
    // Dynamic: under a causal mask later query blocks have more keys to visit.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t n = item / q_blocks, i0 = item % q_blocks * p.query_block;
      forward_block(p, w, n, i0, out + (n * g.queries + i0) * g.value_dim, lse + n * g.queries + i0);
    }
  }
}

// ---- Backward ----

template <class T>
struct Gradients {
  RowView<T> grad_output;
  const T* lse = nullptr;    // [N * L]
  const T* delta = nullptr;  // D = rowsum(dO * O), [N * L]
  T* dq = nullptr;           // contiguous [N, L, E]
  T* dk = nullptr;           // contiguous [N, S, E]
  T* dv = nullptr;           // contiguous [N, S, Ev]
};

template <class T>
struct BackwardScratch {
  T* probs;    // P
  T* dprobs;   // dP, then dS
  T* dropped;  // Pd (dropout only)
  T* keep;     // one row of keep factors
  T* dkt;      // dK^T [E, S] of the thread's head (the key blocks it owns)
  T* dvt;      // dV^T [Ev, S]
  HeadTransposes<T> heads;
};

// Tile (i0, j0) of batch n: adds its terms to dQ_i (want_dq) and to dK_j^T, dV_j^T in the
// scratch (want_dkv).
template <class T>
void backward_tile(const Problem<T>& p, const Gradients<T>& grads, BackwardScratch<T>& w, int64_t n, int64_t i0,
                   int64_t j0, bool want_dq, bool want_dkv) {
  const AttentionGeometry& g = p.g;
  const int64_t rows = p.rows_at(i0), cols = p.cols_at(i0, j0), bk = p.key_block, keys = g.keys;
  T* probs = w.probs;
  T* dprobs = w.dprobs;
  masked_scores(p, w.heads, n, i0, rows, j0, cols, probs);
  const T* lse = grads.lse + n * g.queries + i0;
  for (int64_t r = 0; r < rows; ++r) {
    T* s = probs + r * bk;
    if (lse[r] == kMinusInfinity<T>) {  // no key took part in this row
      std::fill(s, s + cols, T(0));
    } else {
      exp_shifted(s, cols, lse[r]);
    }
  }
  const T* dropped = probs;  // the weights that met V
  if (p.dropout.active) {
    for (int64_t r = 0; r < rows; ++r) {
      p.dropout.keep_factors(n, i0 + r, j0, cols, w.keep);
      const T* s = probs + r * bk;
      const T* keep = w.keep;
      T* d = w.dropped + r * bk;
      const T keep_scale = p.keep_scale;
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) d[j] = s[j] * keep[j] * keep_scale;
    }
    dropped = w.dropped;
  }
  const T* grad_out = grads.grad_output.row(n, i0);
  const int64_t ld_grad = grads.grad_output.ld;
  if (want_dkv) {  // dV_j^T += dO_i^T Pd
    gemm<T>(true, false, g.value_dim, cols, rows, T(1), grad_out, ld_grad, dropped, bk, T(1), w.dvt + j0, keys);
  }
  gemm<T>(false, false, rows, cols, g.value_dim, T(1), grad_out, ld_grad, w.heads.vt + j0, keys, T(0), dprobs, bk);
  const T* delta = grads.delta + n * g.queries + i0;
  for (int64_t r = 0; r < rows; ++r) {
    const T* s = probs + r * bk;
    const T* d = dropped + r * bk;
    T* ds = dprobs + r * bk;
    const T delta_r = delta[r];
    if (p.dropout.active) {
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) ds[j] = d[j] * ds[j] - s[j] * delta_r;
    } else {
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) ds[j] = s[j] * (ds[j] - delta_r);
    }
  }
  if (want_dq) {  // dQ_i += scale dS K_j
    gemm<T>(false, false, rows, g.head_dim, cols, p.scale, dprobs, bk, p.k.row(n, j0), p.k.ld, T(1),
            grads.dq + (n * g.queries + i0) * g.head_dim, g.head_dim);
  }
  if (want_dkv) {  // dK_j^T += scale Q_i^T dS
    gemm<T>(true, false, g.head_dim, cols, rows, p.scale, p.q.row(n, i0), p.q.ld, dprobs, bk, T(1), w.dkt + j0, keys);
  }
}

// Keys [j0, j0 + cols) of head n: zeroes their dK^T, dV^T scratch columns (begin), or
// writes them out to dk and dv (end).
template <class T>
void clear_key_gradients(const Problem<T>& p, BackwardScratch<T>& w, int64_t j0, int64_t cols) {
  const AttentionGeometry& g = p.g;
  for (int64_t e = 0; e < g.head_dim; ++e) std::fill(w.dkt + e * g.keys + j0, w.dkt + e * g.keys + j0 + cols, T(0));
  for (int64_t e = 0; e < g.value_dim; ++e) std::fill(w.dvt + e * g.keys + j0, w.dvt + e * g.keys + j0 + cols, T(0));
}

template <class T>
void store_key_gradients(const Problem<T>& p, const Gradients<T>& grads, const BackwardScratch<T>& w, int64_t n,
                         int64_t j0, int64_t cols) {
  const AttentionGeometry& g = p.g;
  transpose_into(w.dkt + j0, g.keys, g.head_dim, cols, grads.dk + (n * g.keys + j0) * g.head_dim, g.head_dim);
  transpose_into(w.dvt + j0, g.keys, g.value_dim, cols, grads.dv + (n * g.keys + j0) * g.value_dim, g.value_dim);
}

// D = rowsum(dO * O) for every row of every batch.
template <class T>
void row_deltas(const Problem<T>& p, const RowView<T>& grad_output, const RowView<T>& output, T* delta) {
  const AttentionGeometry& g = p.g;
  const int64_t rows = g.batches * g.queries;
#pragma omp parallel for schedule(static) if (p.worth_threads())
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t n = row / g.queries, i = row % g.queries;
    const T* d = grad_output.row(n, i);
    const T* o = output.row(n, i);
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t e = 0; e < g.value_dim; ++e) sum += d[e] * o[e];
    delta[row] = sum;
  }
}

template <class T>
void backward(const Problem<T>& p, const Gradients<T>& grads) {
  const AttentionGeometry& g = p.g;
  const int64_t q_blocks = p.query_blocks(), k_blocks = p.key_blocks(), bq = p.query_block, bk = p.key_block;
  const int threads = p.worth_threads() ? omp_get_max_threads() : 1;
  const int64_t tile = bq * bk, per_head = (g.head_dim + g.value_dim) * g.keys;
  const Scratch<T> scratch(threads, {tile, tile, p.dropout.active ? tile : 0, bk, g.head_dim * g.keys,
                                     g.value_dim * g.keys, per_head});
  auto scratch_of = [&](int thread) {
    T* transposes = scratch.piece(thread, 6);
    return BackwardScratch<T>{scratch.piece(thread, 0),
                              scratch.piece(thread, 1),
                              scratch.piece(thread, 2),
                              scratch.piece(thread, 3),
                              scratch.piece(thread, 4),
                              scratch.piece(thread, 5),
                              {transposes, transposes + g.head_dim * g.keys}};
  };
  if (g.batches >= threads) {  // whole heads per thread, one pass
#pragma omp parallel num_threads(threads)
    {
      BackwardScratch<T> w = scratch_of(omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
      for (int64_t n = 0; n < g.batches; ++n) {
        w.heads.load(p, n);
        clear_key_gradients(p, w, 0, g.keys);
        for (int64_t i0 = 0; i0 < g.queries; i0 += bq) {
          for (int64_t j0 = 0; j0 < g.keys && p.visible(i0, j0); j0 += bk) backward_tile(p, grads, w, n, i0, j0, true, true);
        }
        store_key_gradients(p, grads, w, n, 0, g.keys);
      }
    }
    return;
  }
  // Fewer heads than threads: dK, dV per (n, key block), then dQ per (n, query block).
#pragma omp parallel num_threads(threads)
  {
    BackwardScratch<T> w = scratch_of(omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < g.batches * k_blocks; ++item) {
      const int64_t n = item / k_blocks, j0 = item % k_blocks * bk, cols = std::min(bk, g.keys - j0);
      w.heads.load(p, n);
      clear_key_gradients(p, w, j0, cols);
      for (int64_t i0 = 0; i0 < g.queries; i0 += bq) {
        if (p.visible(i0, j0)) backward_tile(p, grads, w, n, i0, j0, false, true);
      }
      store_key_gradients(p, grads, w, n, j0, cols);
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < g.batches * q_blocks; ++item) {
      const int64_t n = item / q_blocks, i0 = item % q_blocks * bq;
      w.heads.load(p, n);
      for (int64_t j0 = 0; j0 < g.keys && p.visible(i0, j0); j0 += bk) backward_tile(p, grads, w, n, i0, j0, true, false);
    }
  }
}

}  // namespace

std::tuple<Tensor, Tensor> scaled_dot_product_attention(const AttentionOperands& operands) {
  const char* op = "scaled_dot_product_attention";
  const Tensor& q = operands.q;
  check_cpu(q, op);
  Tensor output = empty(operands.geometry.output_shape(), q.dtype(), q.device());
  Tensor logsumexp = empty(operands.geometry.logsumexp_shape(), attention_score_dtype(q.dtype()), q.device());
  dispatch_floating(q.dtype(), op, [&]<class T>() { forward(make_problem<T>(operands), output, logsumexp); });
  return {output, logsumexp};
}

std::tuple<Tensor, Tensor, Tensor> scaled_dot_product_attention_backward(const AttentionBackwardOperands& operands) {
  const char* op = "scaled_dot_product_attention_backward";
  const Tensor &q = operands.forward.q, &k = operands.forward.k, &v = operands.forward.v;
  const AttentionGeometry& g = operands.forward.geometry;
  check_cpu(q, op);
  Tensor dq = zeros(q.sizes(), q.dtype(), q.device());
  Tensor dk = empty(k.sizes(), k.dtype(), k.device());
  Tensor dv = empty(v.sizes(), v.dtype(), v.device());
  dispatch_floating(q.dtype(), op, [&]<class T>() {
    const Problem<T> p = make_problem<T>(operands.forward);
    Gradients<T> grads;
    grads.grad_output = row_view<T>(operands.grad_output, g.batch_shape);
    const Tensor lse = contiguous(operands.logsumexp);
    Tensor delta = empty({g.batches * g.queries}, q.dtype(), q.device());
    row_deltas(p, grads.grad_output, row_view<T>(operands.output, g.batch_shape), delta.data_ptr<T>());
    grads.lse = static_cast<const T*>(lse.data_ptr());
    grads.delta = delta.data_ptr<T>();
    grads.dq = dq.data_ptr<T>();
    grads.dk = dk.data_ptr<T>();
    grads.dv = dv.data_ptr<T>();
    backward(p, grads);
  });
  return {dq, dk, dv};
}

}  // namespace tessera::cpu
