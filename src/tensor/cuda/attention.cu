// Scaled dot-product attention on CUDA: cuBLAS strided-batched GEMMs (native::matmul)
// around row and element kernels. Unlike the CPU's blocked kernel this materialises the
// scores of each call, [N, L, S]; a fused flash kernel is a later step.
//
// Forward: S = q k^T (cuBLAS); one block per row scales and masks it, takes its maximum and
// sum of exponentials with fixed-order block reductions, writes the row's log-sum-exp and
// the dropped weights Pd = softmax * keep / (1 - p) over S; out = Pd v (cuBLAS).
// Backward: S = q k^T again, and one block per row turns it into P = exp(S - lse) (so the
// weights are never saved); D = rowsum(dO * O); dPd = dO v^T (cuBLAS); an element kernel
// writes Pd and dS = scale (Pd dPd - P D) in place; dv = Pd^T dO, dq = dS k, dk = dS^T q.
// Masks (a dense copy of the broadcast mask), causality, rows with no key (output 0, lse
// -inf) and the dropout bits (dropout_keeps, the bits the CPU draws) follow the CPU kernel.
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

// What the row kernels need to mask a row and draw its dropout bits.
template <class T>
struct RowMasking {
  const bool* keep_mask = nullptr;  // dense [N, L, S] boolean mask, or null
  const T* add_mask = nullptr;         // dense [N, L, S] additive mask, or null
  bool causal = false;
  int64_t queries = 0, keys = 0;
  T scale = 1;
  // Dropout (active when p > 0).
  float p = 0;
  T keep_scale = 1;
  uint64_t philox_key = 0, step = 0;
  int64_t first_row = 0, cols = 1;

  // scale * s masked, for element (row, j) of the [N * L, S] scores.
  __device__ T masked(T s, int64_t row, int64_t j) const {
    const int64_t e = row * keys + j;
    const T minus_infinity = -static_cast<T>(INFINITY);
    if (causal && j > row % queries) return minus_infinity;
    if (keep_mask != nullptr && !keep_mask[e]) return minus_infinity;
    T x = s * scale;
    if (add_mask != nullptr) x += add_mask[e];
    return x;
  }
  // keep / (1 - p) for the weight at (row, j): 1 without dropout.
  __device__ T dropout_factor(int64_t row, int64_t j) const {
    if (p <= 0) return T(1);
    const int64_t e = row * keys + j;
    return dropout_keeps(philox_key, step, first_row + e / cols, e % cols, p) ? keep_scale : T(0);
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

// Forward: scores [rows, S] become the dropped softmax weights; lse [rows].
template <class T>
__global__ void softmax_rows_kernel(T* scores, int64_t rows, RowMasking<T> m, T* lse) {
  const T minus_infinity = -static_cast<T>(INFINITY);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    T* s = scores + row * m.keys;
    T local_max = minus_infinity;
    for (int64_t j = threadIdx.x; j < m.keys; j += blockDim.x) {
      const T x = m.masked(s[j], row, j);
      s[j] = x;
      local_max = nan_maximum(local_max, x);
    }
    const T row_max = block_maximum(local_max);
    T local_sum = 0;
    if (row_max != minus_infinity) {
      for (int64_t j = threadIdx.x; j < m.keys; j += blockDim.x) local_sum += exp_of(s[j] - row_max);
    }
    const T sum = block_sum(local_sum);
    if (threadIdx.x == 0) lse[row] = sum == T(0) ? minus_infinity : row_max + log_of(sum);
    for (int64_t j = threadIdx.x; j < m.keys; j += blockDim.x) {
      s[j] = sum == T(0) ? T(0) : exp_of(s[j] - row_max) / sum * m.dropout_factor(row, j);
    }
  }
}

// Backward: scores [rows, S] become P = exp(masked - lse), 0 in rows without keys.
template <class T>
__global__ void recompute_probs_kernel(T* scores, int64_t total, RowMasking<T> m, const T* lse) {
  const T minus_infinity = -static_cast<T>(INFINITY);
  for (int64_t e = thread_index(); e < total; e += thread_count()) {
    const int64_t row = e / m.keys, j = e % m.keys;
    const T l = lse[row];
    scores[e] = l == minus_infinity ? T(0) : exp_of(m.masked(scores[e], row, j) - l);
  }
}

// D[row] = sum over e of dO[row, e] * O[row, e].
template <class T>
__global__ void row_deltas_kernel(const T* grad_output, const T* output, int64_t rows, int64_t width, T* delta) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    T local = 0;
    for (int64_t e = threadIdx.x; e < width; e += blockDim.x) local += grad_output[row * width + e] * output[row * width + e];
    const T sum = block_sum(local);
    if (threadIdx.x == 0) delta[row] = sum;
  }
}

// probs: P -> Pd; dprobs: dPd -> dS = scale (Pd dPd - P D).
template <class T>
__global__ void score_gradients_kernel(T* probs, T* dprobs, int64_t total, RowMasking<T> m, const T* delta) {
  for (int64_t e = thread_index(); e < total; e += thread_count()) {
    const int64_t row = e / m.keys, j = e % m.keys;
    const T p = probs[e];
    const T dropped = p * m.dropout_factor(row, j);
    dprobs[e] = m.scale * (dropped * dprobs[e] - p * delta[row]);
    probs[e] = dropped;
  }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, kMaxBlocks)); }

// The operands as [N, rows, cols] batches of dense matrices.
Tensor as_batches(const Tensor& t, int64_t batches) {
  return view(contiguous(t), {batches, t.size(-2), t.size(-1)});
}

template <class T>
RowMasking<T> row_masking(const AttentionOperands& operands, Tensor& dense_mask) {
  const AttentionOptions& options = operands.options;
  const AttentionGeometry& g = operands.geometry;
  RowMasking<T> m;
  m.causal = options.is_causal;
  m.queries = g.queries;
  m.keys = g.keys;
  m.scale = static_cast<T>(options.scale);
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
    m.keep_scale = options.dropout_p < 1 ? static_cast<T>(1.0 / (1.0 - options.dropout_p)) : T(0);
    m.philox_key = dropout_philox_key(options.dropout_key);
    m.step = options.dropout_key.step;
    m.first_row = options.dropout_key.first_row;
    m.cols = std::max<int64_t>(g.dropout_cols(), 1);
  }
  return m;
}

}  // namespace

std::tuple<Tensor, Tensor> scaled_dot_product_attention(const AttentionOperands& operands) {
  const char* op = "scaled_dot_product_attention";
  const Tensor &q = operands.q, &k = operands.k, &v = operands.v;
  const AttentionGeometry& g = operands.geometry;
  DeviceGuard guard = enter_cuda_device(q, op);
  const int64_t n = g.batches, rows = n * g.queries;
  Tensor logsumexp = empty(g.logsumexp_shape(), q.dtype(), q.device());
  Tensor output = empty(g.output_shape(), q.dtype(), q.device());
  if (rows == 0) return {output, logsumexp};
  device_dispatch_floating(q.dtype(), op, [&]<class T>() {
    Tensor dense_mask;
    const RowMasking<T> m = row_masking<T>(operands, dense_mask);
    Tensor scores = matmul(as_batches(q, n), transpose(as_batches(k, n), 1, 2));  // [N, L, S]
    if (g.keys > 0) {
      softmax_rows_kernel<T><<<row_blocks(rows), kThreads, 0, compute_stream(q.device().index)>>>(
          scores.data_ptr<T>(), rows, m, logsumexp.data_ptr<T>());
      TS_CUDA_CHECK_LAUNCH("softmax_rows_kernel");
    } else {
      cuda::fill_(logsumexp, -std::numeric_limits<double>::infinity());
    }
    Tensor out3 = view(output, {n, g.queries, g.value_dim});
    cuda::copy_(out3, matmul(scores, as_batches(v, n)));
  });
  return {output, logsumexp};
}

std::tuple<Tensor, Tensor, Tensor> scaled_dot_product_attention_backward(const AttentionBackwardOperands& operands) {
  const char* op = "scaled_dot_product_attention_backward";
  const Tensor &q = operands.forward.q, &k = operands.forward.k, &v = operands.forward.v;
  const AttentionGeometry& g = operands.forward.geometry;
  DeviceGuard guard = enter_cuda_device(q, op);
  const int64_t n = g.batches, rows = n * g.queries;
  Tensor dq = zeros(q.sizes(), q.dtype(), q.device());
  Tensor dk = zeros(k.sizes(), k.dtype(), k.device());
  Tensor dv = zeros(v.sizes(), v.dtype(), v.device());
  if (rows == 0 || g.keys == 0) return {dq, dk, dv};
  device_dispatch_floating(q.dtype(), op, [&]<class T>() {
    Tensor dense_mask;
    const RowMasking<T> m = row_masking<T>(operands.forward, dense_mask);
    const cudaStream_t stream = compute_stream(q.device().index);
    const Tensor q3 = as_batches(q, n), k3 = as_batches(k, n), v3 = as_batches(v, n);
    const Tensor grad3 = as_batches(operands.grad_output, n), out3 = as_batches(operands.output, n);
    const Tensor lse = contiguous(operands.logsumexp);
    Tensor probs = matmul(q3, transpose(k3, 1, 2));
    const int64_t total = probs.numel();
    recompute_probs_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(probs.data_ptr<T>(), total, m,
                                                                          static_cast<const T*>(lse.data_ptr()));
    TS_CUDA_CHECK_LAUNCH("recompute_probs_kernel");
    Tensor delta = empty({rows}, q.dtype(), q.device());
    row_deltas_kernel<T><<<row_blocks(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(grad3.data_ptr()), static_cast<const T*>(out3.data_ptr()), rows, g.value_dim,
        delta.data_ptr<T>());
    TS_CUDA_CHECK_LAUNCH("row_deltas_kernel");
    Tensor dprobs = matmul(grad3, transpose(v3, 1, 2));
    score_gradients_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(probs.data_ptr<T>(), dprobs.data_ptr<T>(),
                                                                          total, m, delta.data_ptr<T>());
    TS_CUDA_CHECK_LAUNCH("score_gradients_kernel");
    Tensor dq3 = view(dq, {n, g.queries, g.head_dim});
    Tensor dk3 = view(dk, {n, g.keys, g.head_dim});
    Tensor dv3 = view(dv, {n, g.keys, g.value_dim});
    cuda::copy_(dv3, matmul(transpose(probs, 1, 2), grad3));
    cuda::copy_(dq3, matmul(dprobs, k3));
    cuda::copy_(dk3, matmul(transpose(dprobs, 1, 2), q3));
  });
  return {dq, dk, dv};
}

}  // namespace tessera::cuda
