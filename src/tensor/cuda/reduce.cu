// Reductions on CUDA: sum, amax and max with indices.
//
// As on the CPU, the input is first laid out as a contiguous [outer, inner] matrix with
// the reduced dims inner (kernel_shapes.h: as_outer_inner, a strided copy when needed),
// and each row is reduced:
//  - short rows (inner <= kShortRow): one thread per row;
//  - otherwise one block per row, threads striding along it, then a tree in shared
//    memory. Long rows of few outputs are cut into chunks reduced by separate blocks
//    into a partial [outer, chunks] matrix, which a second pass of the same kernel reduces.
// No atomics: the summation order is fixed, so results are reproducible run to run.
// Floating sums accumulate in double and integer sums in int64, as on the CPU. max picks
// the first NaN if there is one, else the first maximum, as the CPU does.
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/device_types.cuh"
#include "tessera/tensor/cuda/launch.cuh"
#include "tessera/tensor/cuda/kernels.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cuda {

using namespace native;

namespace {

constexpr int64_t kShortRow = 16;
constexpr int64_t kChunkElements = 32768;  // per block when a row is split
constexpr int64_t kMaxChunks = 1024;

template <class T>
using Accumulator = std::conditional_t<is_device_floating<T>, double, int64_t>;

// How a row of `inner` elements is split between blocks.
struct Chunking {
  int64_t chunks = 1, chunk = 0;
};

Chunking chunking(int64_t outer, int64_t inner) {
  Chunking c;
  c.chunk = inner;
  if (outer >= 1024 || inner <= kChunkElements) return c;
  c.chunks = std::min<int64_t>(kMaxChunks, (inner + kChunkElements - 1) / kChunkElements);
  c.chunk = (inner + c.chunks - 1) / c.chunks;
  c.chunks = (inner + c.chunk - 1) / c.chunk;  // every chunk non-empty
  return c;
}

// ---- sum ----

// out[row * chunks + c] = sum of x[row, c * chunk : (c + 1) * chunk].
template <class In, class Acc, class Out>
__global__ void sum_rows_kernel(const In* x, int64_t rows, int64_t inner, int64_t chunks, int64_t chunk, Out* out) {
  for (int64_t task = blockIdx.x; task < rows * chunks; task += gridDim.x) {
    const int64_t row = task / chunks;
    const int64_t begin = (task % chunks) * chunk;
    const int64_t end = begin + chunk < inner ? begin + chunk : inner;
    Acc acc = 0;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) acc += static_cast<Acc>(load(x[row * inner + i]));
    const Acc total = block_sum(acc);
    if (threadIdx.x == 0) out[task] = convert<Out>(total);
  }
}

template <class In, class Acc, class Out>
__global__ void sum_short_rows_kernel(const In* x, int64_t rows, int64_t inner, Out* out) {
  for (int64_t row = thread_index(); row < rows; row += thread_count()) {
    Acc acc = 0;
    for (int64_t i = 0; i < inner; ++i) acc += static_cast<Acc>(load(x[row * inner + i]));
    out[row] = convert<Out>(acc);
  }
}

// out[r] = sum of row r of the contiguous [outer, inner] `matrix`.
template <class T>
void sum_rows(const Tensor& matrix, int64_t outer, int64_t inner, Tensor& out) {
  using Acc = Accumulator<T>;
  cudaStream_t stream = compute_stream(matrix.device().index);
  const auto* x = static_cast<const T*>(matrix.data_ptr());
  auto* o = static_cast<T*>(out.data_ptr());
  if (inner <= kShortRow) {
    sum_short_rows_kernel<T, Acc, T><<<blocks_for(outer), kThreads, 0, stream>>>(x, outer, inner, o);
    TS_CUDA_CHECK_LAUNCH("sum_short_rows_kernel");
    return;
  }
  const Chunking c = chunking(outer, inner);
  if (c.chunks == 1) {
    sum_rows_kernel<T, Acc, T><<<blocks_for(outer * kThreads), kThreads, 0, stream>>>(x, outer, inner, 1, inner, o);
    TS_CUDA_CHECK_LAUNCH("sum_rows_kernel");
    return;
  }
  Tensor partial = empty({outer * c.chunks}, std::is_same_v<Acc, double> ? DType::f64 : DType::i64, matrix.device());
  auto* p = static_cast<Acc*>(partial.data_ptr());
  sum_rows_kernel<T, Acc, Acc><<<blocks_for(outer * c.chunks * kThreads), kThreads, 0, stream>>>(
      x, outer, inner, c.chunks, c.chunk, p);
  TS_CUDA_CHECK_LAUNCH("sum_rows_kernel (chunks)");
  sum_rows_kernel<Acc, Acc, T><<<blocks_for(outer * kThreads), kThreads, 0, stream>>>(p, outer, c.chunks, 1,
                                                                                      c.chunks, o);
  TS_CUDA_CHECK_LAUNCH("sum_rows_kernel (partials)");
}

// ---- max ----

template <class C> __device__ __forceinline__ bool is_nan(C x) { return x != x; }

// A candidate maximum: the element's value and its position in the row (< 0: none yet).
template <class T>
struct Candidate {
  T value;
  int64_t index;
};

// True when `a` should win over `b`: a NaN beats a number, a larger value beats a smaller
// one, and between equals (or two NaNs) the earlier position wins.
template <class T>
__device__ bool better(const Candidate<T>& a, const Candidate<T>& b) {
  if (b.index < 0) return a.index >= 0;
  if (a.index < 0) return false;
  const Compute<T> x = load(a.value), y = load(b.value);
  if constexpr (is_device_floating<T>) {
    const bool x_nan = is_nan(x), y_nan = is_nan(y);
    if (x_nan != y_nan) return x_nan;
    if (x_nan) return a.index < b.index;
  }
  if (x != y) return x > y;
  return a.index < b.index;
}

template <class T>
__device__ Candidate<T> block_max(Candidate<T> mine) {
  __shared__ T values[kThreads];
  __shared__ int64_t indices[kThreads];
  values[threadIdx.x] = mine.value;
  indices[threadIdx.x] = mine.index;
  __syncthreads();
  for (int step = kThreads / 2; step > 0; step >>= 1) {
    if (threadIdx.x < step) {
      Candidate<T> other{values[threadIdx.x + step], indices[threadIdx.x + step]};
      Candidate<T> current{values[threadIdx.x], indices[threadIdx.x]};
      if (better(other, current)) {
        values[threadIdx.x] = other.value;
        indices[threadIdx.x] = other.index;
      }
    }
    __syncthreads();
  }
  const Candidate<T> best{values[0], indices[0]};
  __syncthreads();
  return best;
}

// Element i of row `row` as a candidate: its position is i, or positions[] when this pass
// reduces partial results.
template <class T>
__device__ Candidate<T> candidate_at(const T* x, const int64_t* positions, int64_t row, int64_t inner, int64_t i) {
  return {x[row * inner + i], positions != nullptr ? positions[row * inner + i] : i};
}

template <class T>
__global__ void max_rows_kernel(const T* x, const int64_t* positions, int64_t rows, int64_t inner, int64_t chunks,
                                int64_t chunk, T* values, int64_t* indices) {
  for (int64_t task = blockIdx.x; task < rows * chunks; task += gridDim.x) {
    const int64_t row = task / chunks;
    const int64_t begin = (task % chunks) * chunk;
    const int64_t end = begin + chunk < inner ? begin + chunk : inner;
    Candidate<T> best{T{}, -1};
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const Candidate<T> next = candidate_at(x, positions, row, inner, i);
      if (better(next, best)) best = next;
    }
    best = block_max(best);
    if (threadIdx.x == 0) {
      values[task] = best.value;
      indices[task] = best.index;
    }
  }
}

template <class T>
__global__ void max_short_rows_kernel(const T* x, int64_t rows, int64_t inner, T* values, int64_t* indices) {
  for (int64_t row = thread_index(); row < rows; row += thread_count()) {
    Candidate<T> best{T{}, -1};
    for (int64_t i = 0; i < inner; ++i) {
      const Candidate<T> next = candidate_at<T>(x, nullptr, row, inner, i);
      if (better(next, best)) best = next;
    }
    values[row] = best.value;
    indices[row] = best.index;
  }
}

// values[r], indices[r] = max and its first position in row r of the contiguous [outer, inner] matrix.
template <class T>
void max_rows(const Tensor& matrix, int64_t outer, int64_t inner, T* values, int64_t* indices) {
  cudaStream_t stream = compute_stream(matrix.device().index);
  const auto* x = static_cast<const T*>(matrix.data_ptr());
  if (inner <= kShortRow) {
    max_short_rows_kernel<T><<<blocks_for(outer), kThreads, 0, stream>>>(x, outer, inner, values, indices);
    TS_CUDA_CHECK_LAUNCH("max_short_rows_kernel");
    return;
  }
  const Chunking c = chunking(outer, inner);
  if (c.chunks == 1) {
    max_rows_kernel<T><<<blocks_for(outer * kThreads), kThreads, 0, stream>>>(x, nullptr, outer, inner, 1, inner,
                                                                              values, indices);
    TS_CUDA_CHECK_LAUNCH("max_rows_kernel");
    return;
  }
  Tensor partial_values = empty({outer * c.chunks}, matrix.dtype(), matrix.device());
  Tensor partial_indices = empty({outer * c.chunks}, DType::i64, matrix.device());
  auto* pv = static_cast<T*>(partial_values.data_ptr());
  auto* pi = static_cast<int64_t*>(partial_indices.data_ptr());
  max_rows_kernel<T><<<blocks_for(outer * c.chunks * kThreads), kThreads, 0, stream>>>(x, nullptr, outer, inner,
                                                                                       c.chunks, c.chunk, pv, pi);
  TS_CUDA_CHECK_LAUNCH("max_rows_kernel (chunks)");
  max_rows_kernel<T><<<blocks_for(outer * kThreads), kThreads, 0, stream>>>(pv, pi, outer, c.chunks, 1, c.chunks,
                                                                            values, indices);
  TS_CUDA_CHECK_LAUNCH("max_rows_kernel (partials)");
}

}  // namespace

Tensor sum(const Tensor& self, const Shape& dims, bool keepdim) {
  check_defined(self, "sum");
  check_cuda(self, "sum");
  ReductionPlan plan = plan_reduction(self, dims, keepdim, "sum");
  DeviceGuard guard(self.device());
  DType out_dtype = is_floating(self.dtype()) ? self.dtype() : DType::i64;
  Tensor out = empty(plan.out_shape, out_dtype, self.device());
  if (plan.outer == 0) return out;
  if (plan.inner == 0) {
    cuda::fill_(out, 0.0);
    return out;
  }
  // Integers sum in int64, as in PyTorch.
  Tensor matrix = as_outer_inner(is_floating(self.dtype()) ? self : to_dtype(self, DType::i64), plan);
  device_dispatch_all(out_dtype, [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) sum_rows<T>(matrix, plan.outer, plan.inner, out);  // bool sums in int64
  });
  return out;
}

Tensor amax(const Tensor& self, const Shape& dims, bool keepdim) {
  check_defined(self, "amax");
  check_cuda(self, "amax");
  check_max_dtype(self, "amax");
  ReductionPlan plan = plan_reduction(self, dims, keepdim, "amax");
  TS_CHECK(plan.inner > 0, ValueError, "amax: cannot reduce over an empty dimension of shape ",
           shape_str(self.sizes()));
  DeviceGuard guard(self.device());
  Tensor out = empty(plan.out_shape, self.dtype(), self.device());
  if (plan.outer == 0) return out;
  Tensor indices = empty({plan.outer}, DType::i64, self.device());
  Tensor matrix = as_outer_inner(self, plan);
  device_dispatch_all(self.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      max_rows<T>(matrix, plan.outer, plan.inner, static_cast<T*>(out.data_ptr()),
                  static_cast<int64_t*>(indices.data_ptr()));
    }
  });
  return out;
}

std::tuple<Tensor, Tensor> max_dim(const Tensor& self, int64_t dim, bool keepdim) {
  check_defined(self, "max");
  check_cuda(self, "max");
  check_max_dtype(self, "max");
  ReductionPlan plan = plan_reduction(self, {wrap_dim(dim, self.dim(), "max")}, keepdim, "max");
  TS_CHECK(plan.inner > 0, ValueError, "max: cannot reduce over an empty dimension of shape ",
           shape_str(self.sizes()));
  DeviceGuard guard(self.device());
  Tensor values = empty(plan.out_shape, self.dtype(), self.device());
  Tensor indices = empty(plan.out_shape, DType::i64, self.device());
  if (plan.outer == 0) return {values, indices};
  Tensor matrix = as_outer_inner(self, plan);
  device_dispatch_all(self.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      max_rows<T>(matrix, plan.outer, plan.inner, static_cast<T*>(values.data_ptr()),
                  static_cast<int64_t*>(indices.data_ptr()));
    }
  });
  return {values, indices};
}

}  // namespace tessera::cuda
