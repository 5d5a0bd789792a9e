// Scaled dot-product attention on CUDA: cuBLAS strided-batched GEMMs (matmul) around row
// and element kernels. Unlike the CPU's blocked kernel this materialises the scores of each
// call, [N, L, S]; a fused flash kernel is a later step.
//
// Forward: S = q k^T (cuBLAS); one block per row scales and masks it, takes its maximum and
// sum of exponentials with fixed-order block reductions, writes the row's log-sum-exp and
// the dropped weights Pd = softmax * keep / (1 - p) over S; out = Pd v (cuBLAS).
// Backward: S = q k^T again, and one block per row turns it into P = exp(S - lse) (so the
// weights are never saved); D = rowsum(dO * O); dPd = dO v^T (cuBLAS); an element kernel
// writes Pd and dS = scale (Pd dPd - P D); dv = Pd^T dO, dq = dS k, dk = dS^T q.
// Masks (a dense copy of the broadcast mask), causality, rows with no key (output 0, lse
// -inf) and the dropout bits (dropout_keeps, the bits the CPU draws) follow the CPU kernel.
//
// Precision: the scores, their softmax, the log-sum-exp and dS are kept in the type Score =
// Compute<T> (attention_score_dtype): float32 for float32 and bfloat16 operands, double for
// float64. With bfloat16 operands the GEMMs read bfloat16 and accumulate in float32;
// q k^T and dO v^T are written in float32, and only what feeds the next GEMM (Pd, dS) is
// rounded to bfloat16, as PyTorch's flash kernels do with P and dS.
#include <cmath>

#include "tessera/tensor/attention_geometry.h"
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/device_types.cuh"
#include "tessera/tensor/cuda/launch.cuh"
#include "tessera/tensor/cuda/kernels.h"
#include "tessera/tensor/dropout_key.h"

namespace tessera::cuda {

using namespace native;

namespace {

// What the row kernels need to mask a row of scores (of type Score) and draw its dropout
// bits; an additive mask has the operands' type T.
template <class Score, class T>
struct RowMasking {
  const bool* keep_mask = nullptr;  // dense [N, L, S] boolean mask, or null
  const T* add_mask = nullptr;      // dense [N, L, S] additive mask, or null
  bool causal = false;
  int64_t queries = 0, keys = 0;
  Score scale = 1;
  // Dropout (active when p > 0).
  float p = 0;
  Score keep_scale = 1;
  uint64_t philox_key = 0, step = 0;
  int64_t first_row = 0, cols = 1;

  // scale * s masked, for element (row, j) of the [N * L, S] scores.
  __device__ Score masked(Score s, int64_t row, int64_t j) const {
    const int64_t e = row * keys + j;
    const Score minus_infinity = -static_cast<Score>(INFINITY);
    if (causal && j > row % queries) return minus_infinity;
    if (keep_mask != nullptr && !keep_mask[e]) return minus_infinity;
    Score x = s * scale;
    if (add_mask != nullptr) x += static_cast<Score>(load(add_mask[e]));
    return x;
  }
  // keep / (1 - p) for the weight at (row, j): 1 without dropout.
  __device__ Score dropout_factor(int64_t row, int64_t j) const {
    if (p <= 0) return Score(1);
    const int64_t e = row * keys + j;
    return dropout_keeps(philox_key, step, first_row + e / cols, e % cols, p) ? keep_scale : Score(0);
  }
};

__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return exp(x); }
__device__ __forceinline__ float log_of(float x) { return logf(x); }
__device__ __forceinline__ double log_of(double x) { return log(x); }

// The larger of a and b, NaN when either is (fmax would drop a NaN, and a row of NaN scores
// would then look like a row without keys).
template <class T>
__device__ __forceinline__ T nan_maximum(T a, T b) {
  return (b > a || b != b) ? b : a;
}

// The maximum of `value` over a kThreads-thread block, in a fixed tree order.
template <class T>
__device__ T block_maximum(T value) {
  return block_reduce(value, [](T a, T b) { return nan_maximum(a, b); });
}

// Forward: scores [rows, S] give the dropped softmax weights (T; in place when T is Score)
// and lse [rows].
template <class Score, class T>
__global__ void softmax_rows_kernel(Score* scores, int64_t rows, RowMasking<Score, T> m, Score* lse, T* weights) {
  const Score minus_infinity = -static_cast<Score>(INFINITY);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    Score* s = scores + row * m.keys;
    T* w = weights + row * m.keys;
    Score local_max = minus_infinity;
    for (int64_t j = threadIdx.x; j < m.keys; j += blockDim.x) {
      const Score x = m.masked(s[j], row, j);
      s[j] = x;
      local_max = nan_maximum(local_max, x);
    }
    const Score row_max = block_maximum(local_max);
    Score local_sum = 0;
    if (row_max != minus_infinity) {
      for (int64_t j = threadIdx.x; j < m.keys; j += blockDim.x) local_sum += exp_of(s[j] - row_max);
    }
    const Score sum = block_sum(local_sum);
    if (threadIdx.x == 0) lse[row] = sum == Score(0) ? minus_infinity : row_max + log_of(sum);
    for (int64_t j = threadIdx.x; j < m.keys; j += blockDim.x) {
      w[j] = store<T>(sum == Score(0) ? Score(0) : exp_of(s[j] - row_max) / sum * m.dropout_factor(row, j));
    }
  }
}

// Backward: scores [rows, S] become P = exp(masked - lse), 0 in rows without keys.
template <class Score, class T>
__global__ void recompute_probs_kernel(Score* scores, int64_t total, RowMasking<Score, T> m, const Score* lse) {
  const Score minus_infinity = -static_cast<Score>(INFINITY);
  for (int64_t e = thread_index(); e < total; e += thread_count()) {
    const int64_t row = e / m.keys, j = e % m.keys;
    const Score l = lse[row];
    scores[e] = l == minus_infinity ? Score(0) : exp_of(m.masked(scores[e], row, j) - l);
  }
}

// D[row] = sum over e of dO[row, e] * O[row, e], in Score.
template <class Score, class T>
__global__ void row_deltas_kernel(const T* grad_output, const T* output, int64_t rows, int64_t width, Score* delta) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    Score local = 0;
    for (int64_t e = threadIdx.x; e < width; e += blockDim.x) {
      local += static_cast<Score>(load(grad_output[row * width + e])) * static_cast<Score>(load(output[row * width + e]));
    }
    const Score sum = block_sum(local);
    if (threadIdx.x == 0) delta[row] = sum;
  }
}

// From P and dPd (Score): Pd and dS = scale (Pd dPd - P D), written as T (in place when T is Score).
template <class Score, class T>
__global__ void score_gradients_kernel(const Score* probs, const Score* dprobs, int64_t total, RowMasking<Score, T> m,
                                       const Score* delta, T* dropped_probs, T* dscores) {
  for (int64_t e = thread_index(); e < total; e += thread_count()) {
    const int64_t row = e / m.keys, j = e % m.keys;
    const Score p = probs[e];
    const Score dropped = p * m.dropout_factor(row, j);
    dscores[e] = store<T>(m.scale * (dropped * dprobs[e] - p * delta[row]));
    dropped_probs[e] = store<T>(dropped);
  }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, kMaxBlocks)); }

// The operands as [N, rows, cols] batches of dense matrices.
Tensor as_batches(const Tensor& t, int64_t batches) {
  return view(contiguous(t), {batches, t.size(-2), t.size(-1)});
}

template <class Score, class T>
RowMasking<Score, T> row_masking(const AttentionOperands& operands, Tensor& dense_mask) {
  const AttentionOptions& options = operands.options;
  const AttentionGeometry& g = operands.geometry;
  RowMasking<Score, T> m;
  m.causal = options.is_causal;
  m.queries = g.queries;
  m.keys = g.keys;
  m.scale = static_cast<Score>(options.scale);
  if (options.attn_mask.defined()) {
    dense_mask = contiguous(expand(options.attn_mask, g.weights_shape()));
    if (is_boolean_mask(dense_mask.dtype())) {
      m.keep_mask = static_cast<const bool*>(dense_mask.data_ptr());
    } else {
      m.add_mask = static_cast<const T*>(dense_mask.data_ptr());
    }
  }
  if (options.dropout_p > 0) {
    m.p = static_cast<float>(options.dropout_p);
    m.keep_scale = options.dropout_p < 1 ? static_cast<Score>(1.0 / (1.0 - options.dropout_p)) : Score(0);
    m.philox_key = dropout_philox_key(options.dropout_key);
    m.step = options.dropout_key.step;
    m.first_row = options.dropout_key.first_row;
    m.cols = std::max<int64_t>(g.dropout_cols(), 1);
  }
  return m;
}

// The weights as the next GEMM reads them: the scores' own buffer when they have the
// operands' dtype, else a buffer of that dtype beside them.
Tensor weights_beside(const Tensor& scores, DType dtype) {
  return scores.dtype() == dtype ? scores : empty(scores.sizes(), dtype, scores.device());
}

}  // namespace

std::tuple<Tensor, Tensor> scaled_dot_product_attention(const AttentionOperands& operands) {
  const char* op = "scaled_dot_product_attention";
  const Tensor &q = operands.q, &k = operands.k, &v = operands.v;
  const AttentionGeometry& g = operands.geometry;
  DeviceGuard guard = enter_cuda_device(q, op);
  const int64_t n = g.batches, rows = n * g.queries;
  const DType score_dtype = attention_score_dtype(q.dtype());
  Tensor logsumexp = empty(g.logsumexp_shape(), score_dtype, q.device());
  Tensor output = empty(g.output_shape(), q.dtype(), q.device());
  if (rows == 0) return {output, logsumexp};
  device_dispatch_floating_bf16(q.dtype(), op, [&]<class T>() {
    using Score = Compute<T>;
    Tensor dense_mask;
    const RowMasking<Score, T> m = row_masking<Score, T>(operands, dense_mask);
    Tensor scores = matmul(as_batches(q, n), transpose(as_batches(k, n), 1, 2), score_dtype);  // [N, L, S]
    Tensor weights = weights_beside(scores, q.dtype());
    if (g.keys > 0) {
      softmax_rows_kernel<Score, T><<<row_blocks(rows), kThreads, 0, compute_stream(q.device().index)>>>(
          static_cast<Score*>(scores.data_ptr()), rows, m, static_cast<Score*>(logsumexp.data_ptr()),
          static_cast<T*>(weights.data_ptr()));
      TS_CUDA_CHECK_LAUNCH("softmax_rows_kernel");
    } else {
      cuda::fill_(logsumexp, -std::numeric_limits<double>::infinity());
    }
    Tensor out3 = view(output, {n, g.queries, g.value_dim});
    cuda::copy_(out3, matmul(weights, as_batches(v, n)));
  });
  return {output, logsumexp};
}

std::tuple<Tensor, Tensor, Tensor> scaled_dot_product_attention_backward(const AttentionBackwardOperands& operands) {
  const char* op = "scaled_dot_product_attention_backward";
  const Tensor &q = operands.forward.q, &k = operands.forward.k, &v = operands.forward.v;
  const AttentionGeometry& g = operands.forward.geometry;
  DeviceGuard guard = enter_cuda_device(q, op);
  const int64_t n = g.batches, rows = n * g.queries;
  const DType score_dtype = attention_score_dtype(q.dtype());
  Tensor dq = zeros(q.sizes(), q.dtype(), q.device());
  Tensor dk = zeros(k.sizes(), k.dtype(), k.device());
  Tensor dv = zeros(v.sizes(), v.dtype(), v.device());
  if (rows == 0 || g.keys == 0) return {dq, dk, dv};
  device_dispatch_floating_bf16(q.dtype(), op, [&]<class T>() {
    using Score = Compute<T>;
    Tensor dense_mask;
    const RowMasking<Score, T> m = row_masking<Score, T>(operands.forward, dense_mask);
    const cudaStream_t stream = compute_stream(q.device().index);
    const Tensor q3 = as_batches(q, n), k3 = as_batches(k, n), v3 = as_batches(v, n);
    const Tensor grad3 = as_batches(operands.grad_output, n), out3 = as_batches(operands.output, n);
    const Tensor lse = contiguous(operands.logsumexp);
    Tensor probs = matmul(q3, transpose(k3, 1, 2), score_dtype);
    const int64_t total = probs.numel();
    recompute_probs_kernel<Score, T><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<Score*>(probs.data_ptr()), total, m, static_cast<const Score*>(lse.data_ptr()));
    TS_CUDA_CHECK_LAUNCH("recompute_probs_kernel");
    Tensor delta = empty({rows}, score_dtype, q.device());
    row_deltas_kernel<Score, T><<<row_blocks(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(grad3.data_ptr()), static_cast<const T*>(out3.data_ptr()), rows, g.value_dim,
        static_cast<Score*>(delta.data_ptr()));
    TS_CUDA_CHECK_LAUNCH("row_deltas_kernel");
    Tensor dprobs = matmul(grad3, transpose(v3, 1, 2), score_dtype);
    Tensor dropped = weights_beside(probs, q.dtype()), dscores = weights_beside(dprobs, q.dtype());
    score_gradients_kernel<Score, T><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const Score*>(probs.data_ptr()), static_cast<const Score*>(dprobs.data_ptr()), total, m,
        static_cast<const Score*>(delta.data_ptr()), static_cast<T*>(dropped.data_ptr()), static_cast<T*>(dscores.data_ptr()));
    TS_CUDA_CHECK_LAUNCH("score_gradients_kernel");
    Tensor dq3 = view(dq, {n, g.queries, g.head_dim});
    Tensor dk3 = view(dk, {n, g.keys, g.head_dim});
    Tensor dv3 = view(dv, {n, g.keys, g.value_dim});
    cuda::copy_(dv3, matmul(transpose(dropped, 1, 2), grad3));
    cuda::copy_(dq3, matmul(dscores, k3));
    cuda::copy_(dk3, matmul(transpose(dscores, 1, 2), q3));
  });
  return {dq, dk, dv};
}

}  // namespace tessera::cuda
