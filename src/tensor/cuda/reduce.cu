// Reductions on CUDA: sum, amax and max with indices.
//
// A sum of a dense input over its leading dims ([A, K] summed over A: a bias gradient) or
// over the dims around a middle block ([A, K, B] summed over A and B: a convolution's bias
// gradient over N, H and W) reads the input in place: columns are summed by one thread
// each (threads of a warp read neighbouring columns), the [A, K, B] case by blocks as
// rows are, below. Long columns are cut into chunks whose partial sums a second pass adds.
// Otherwise, as on the CPU, the input is first laid out as a contiguous [outer, inner]
// matrix with the reduced dims inner (kernel_shapes.h: as_outer_inner, a strided copy
// when needed), and each row is reduced:
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

// What each sum below launches with: the input's and output's elements, the input
// device's compute stream, and the first pass's partial sums (in the accumulator's dtype)
// where it takes two.
template <class T>
struct SumLaunch {
  using Acc = Accumulator<T>;
  const T* in;
  T* out;
  cudaStream_t stream;
  Device device;

  SumLaunch(const Tensor& x, Tensor& result)
      : in(static_cast<const T*>(x.data_ptr())),
        out(static_cast<T*>(result.data_ptr())),
        stream(compute_stream(x.device().index)),
        device(x.device()) {}

  Tensor partials(int64_t count) const {
    return empty({count}, std::is_same_v<Acc, double> ? DType::f64 : DType::i64, device);
  }
};

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

// One thread a line, its elements added in order: out[part * lines + l] = the sum of
// elements [part * per_part, ...) of line l, whose element e is x[l * line_stride +
// e * element_stride]. The rows of a [lines, length] matrix (strides length, 1), or its
// columns ([length, lines]: strides 1, lines), where threads of a warp take neighbouring
// columns and read coalesced; with one part, whole lines.
template <class In, class Acc, class Out>
__global__ void sum_lines_kernel(const In* x, int64_t lines, int64_t length, int64_t line_stride,
                                 int64_t element_stride, int64_t parts, int64_t per_part, Out* out) {
  for (int64_t task = thread_index(); task < parts * lines; task += thread_count()) {
    const int64_t part = task / lines, line = task % lines;
    const int64_t begin = part * per_part;
    const int64_t end = begin + per_part < length ? begin + per_part : length;
    Acc acc = 0;
    for (int64_t e = begin; e < end; ++e) acc += static_cast<Acc>(load(x[line * line_stride + e * element_stride]));
    out[task] = convert<Out>(acc);
  }
}

// out[r] = sum of row r of the contiguous [outer, inner] `matrix`.
template <class T>
void sum_rows(const Tensor& matrix, int64_t outer, int64_t inner, Tensor& out) {
  const SumLaunch<T> s(matrix, out);
  using Acc = typename SumLaunch<T>::Acc;
  if (inner <= kShortRow) {
    sum_lines_kernel<T, Acc, T><<<blocks_for(outer), kThreads, 0, s.stream>>>(s.in, outer, inner, inner, 1, 1, inner,
                                                                               s.out);
    TS_CUDA_CHECK_LAUNCH("sum_lines_kernel (short rows)");
    return;
  }
  const Chunking c = chunking(outer, inner);
  if (c.chunks == 1) {
    sum_rows_kernel<T, Acc, T><<<blocks_for(outer * kThreads), kThreads, 0, s.stream>>>(s.in, outer, inner, 1, inner,
                                                                                        s.out);
    TS_CUDA_CHECK_LAUNCH("sum_rows_kernel");
    return;
  }
  Tensor partial = s.partials(outer * c.chunks);
  auto* p = static_cast<Acc*>(partial.data_ptr());
  sum_rows_kernel<T, Acc, Acc><<<blocks_for(outer * c.chunks * kThreads), kThreads, 0, s.stream>>>(
      s.in, outer, inner, c.chunks, c.chunk, p);
  TS_CUDA_CHECK_LAUNCH("sum_rows_kernel (chunks)");
  sum_rows_kernel<Acc, Acc, T><<<blocks_for(outer * kThreads), kThreads, 0, s.stream>>>(p, outer, c.chunks, 1,
                                                                                        c.chunks, s.out);
  TS_CUDA_CHECK_LAUNCH("sum_rows_kernel (partials)");
}

// ---- sums that read the input in place ----

// x is [rows, columns]; out[k] = the sum of column k. Long columns are cut into parts
// whose partial sums ([parts, columns]) a second pass adds, so that a few columns still
// keep the device busy.
template <class T>
void sum_columns(const Tensor& x, int64_t rows, int64_t columns, Tensor& out) {
  const SumLaunch<T> s(x, out);
  using Acc = typename SumLaunch<T>::Acc;
  constexpr int64_t kWantedThreads = int64_t{1} << 17;  // enough to fill a large GPU
  constexpr int64_t kMinRowsPerPart = 16;
  const int64_t parts = std::clamp<int64_t>(
      std::min(rows / kMinRowsPerPart, kWantedThreads / std::max<int64_t>(columns, 1)), 1, kMaxChunks);
  if (parts == 1) {
    sum_lines_kernel<T, Acc, T><<<blocks_for(columns), kThreads, 0, s.stream>>>(s.in, columns, rows, 1, columns, 1,
                                                                                 rows, s.out);
    TS_CUDA_CHECK_LAUNCH("sum_lines_kernel (columns)");
    return;
  }
  const int64_t rows_per_part = (rows + parts - 1) / parts;
  Tensor partial = s.partials(parts * columns);
  auto* p = static_cast<Acc*>(partial.data_ptr());
  sum_lines_kernel<T, Acc, Acc><<<blocks_for(parts * columns), kThreads, 0, s.stream>>>(
      s.in, columns, rows, 1, columns, parts, rows_per_part, p);
  TS_CUDA_CHECK_LAUNCH("sum_lines_kernel (column parts)");
  sum_lines_kernel<Acc, Acc, T><<<blocks_for(columns), kThreads, 0, s.stream>>>(p, columns, parts, 1, columns, 1,
                                                                                parts, s.out);
  TS_CUDA_CHECK_LAUNCH("sum_lines_kernel (partials)");
}

// out[task] for task = k * chunks + c: the sum of x[a, k, b] over a and b, for the c-th
// chunk of the a * b positions.
template <class In, class Acc, class Out>
__global__ void sum_around_kernel(const In* x, int64_t before, int64_t middle, int64_t after, int64_t chunks,
                                  int64_t chunk, Out* out) {
  const int64_t positions = before * after;
  for (int64_t task = blockIdx.x; task < middle * chunks; task += gridDim.x) {
    const int64_t k = task / chunks;
    const int64_t begin = (task % chunks) * chunk;
    const int64_t end = begin + chunk < positions ? begin + chunk : positions;
    Acc acc = 0;
    for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
      const int64_t a = j / after, b = j % after;
      acc += static_cast<Acc>(load(x[(a * middle + k) * after + b]));
    }
    const Acc total = block_sum(acc);
    if (threadIdx.x == 0) out[task] = convert<Out>(total);
  }
}

// x is [before, middle, after]; out[k] = the sum over the first and last dims.
template <class T>
void sum_around(const Tensor& x, int64_t before, int64_t middle, int64_t after, Tensor& out) {
  const SumLaunch<T> s(x, out);
  using Acc = typename SumLaunch<T>::Acc;
  const Chunking c = chunking(middle, before * after);
  if (c.chunks == 1) {
    sum_around_kernel<T, Acc, T><<<blocks_for(middle * kThreads), kThreads, 0, s.stream>>>(s.in, before, middle, after,
                                                                                          1, before * after, s.out);
    TS_CUDA_CHECK_LAUNCH("sum_around_kernel");
    return;
  }
  Tensor partial = s.partials(middle * c.chunks);
  auto* p = static_cast<Acc*>(partial.data_ptr());
  sum_around_kernel<T, Acc, Acc><<<blocks_for(middle * c.chunks * kThreads), kThreads, 0, s.stream>>>(
      s.in, before, middle, after, c.chunks, c.chunk, p);
  TS_CUDA_CHECK_LAUNCH("sum_around_kernel (chunks)");
  sum_rows_kernel<Acc, Acc, T><<<blocks_for(middle * kThreads), kThreads, 0, s.stream>>>(p, middle, c.chunks, 1,
                                                                                        c.chunks, s.out);
  TS_CUDA_CHECK_LAUNCH("sum_rows_kernel (partials)");
}

// How a dense input's reduced dims lie, size-1 dims ignored: [A, K] reduced over A, or
// [A, K, B] reduced over A and B. Anything else (including the reduced dims last, which
// as_outer_inner serves without a copy) is `other`.
struct InPlaceSum {
  enum Kind { other, columns, around } kind = other;
  int64_t before = 1, middle = 1, after = 1;
};

InPlaceSum in_place_sum(const Tensor& x, const ReductionPlan& plan) {
  InPlaceSum result;
  if (!x.is_contiguous()) return result;
  // Runs of reduced (true) and kept (false) dims, with their sizes.
  std::vector<std::pair<bool, int64_t>> runs;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t size = x.size(d);
    if (size == 1) continue;
    const bool reduced = plan.reduced[static_cast<size_t>(d)];
    if (!runs.empty() && runs.back().first == reduced) {
      runs.back().second *= size;
    } else {
      runs.push_back({reduced, size});
    }
  }
  if (runs.size() == 2 && runs[0].first && !runs[1].first) {
    result = {InPlaceSum::columns, runs[0].second, runs[1].second, 1};
  } else if (runs.size() == 3 && runs[0].first && !runs[1].first && runs[2].first) {
    result = {InPlaceSum::around, runs[0].second, runs[1].second, runs[2].second};
  }
  return result;
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

// The dispatch layer has checked the input and allocated the outputs (kernel_shapes.h).
void sum(const SumCall& call) {
  DeviceGuard guard(call.device());
  const Tensor& input = call.self;
  Tensor out = call.values;
  const InPlaceSum layout = in_place_sum(input, call.plan);
  device_dispatch_all(out.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {  // bool arrives as int64
      if (layout.kind == InPlaceSum::columns) {
        sum_columns<T>(input, layout.before, layout.middle, out);
      } else if (layout.kind == InPlaceSum::around) {
        sum_around<T>(input, layout.before, layout.middle, layout.after, out);
      } else {
        sum_rows<T>(as_outer_inner(input, call.plan), call.plan.outer, call.plan.inner, out);
      }
    }
  });
}

namespace {

// amax and max(dim): the maximum of each row of the [outer, inner] matrix; amax keeps
// the positions in a scratch tensor.
void max_rows_of(const ReductionCall& call) {
  DeviceGuard guard(call.device());
  const ReductionPlan& plan = call.plan;
  Tensor indices = call.indices.defined() ? call.indices : empty({plan.outer}, DType::i64, call.device());
  Tensor matrix = as_outer_inner(call.self, plan);
  device_dispatch_all(call.self.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      max_rows<T>(matrix, plan.outer, plan.inner, static_cast<T*>(call.values.data_ptr()),
                  static_cast<int64_t*>(indices.data_ptr()));
    }
  });
}

}  // namespace

void amax(const AmaxCall& call) { max_rows_of(call); }
void max_dim(const MaxDimCall& call) { max_rows_of(call); }

}  // namespace tessera::cuda
