// How the CUDA kernels are launched and how they walk strided, broadcast operands.
//
// Every element-wise kernel is one of two shapes, chosen on the host:
//  - contiguous: every operand is dense and in the output's order, so element i of each
//    is at offset i. Each thread moves kVectorWidth elements per step with one aligned
//    vector load/store per operand when every pointer is aligned to it (the "vectorised"
//    path), else one element at a time.
//  - strided: offsets come from a StridedLayout (the output shape with, per operand,
//    element strides; broadcast dims have stride 0). Dims are coalesced first, as on the
//    CPU (cpu/loops.h), so most views end up with one or two dims.
// Loops are grid-stride loops, so any size runs with a bounded grid; nothing is launched
// for an empty tensor (a zero-size grid is a launch error).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "tessera/tensor/cuda/check.h"
#include "tessera/tensor/cuda/stream.h"
#include "tessera/tensor/tensor.h"

namespace tessera::cuda {

inline constexpr int kThreads = 256;          // per block; a power of two (block reductions rely on it)
inline constexpr int64_t kMaxBlocks = 65535;  // grid-stride loops cover the rest
inline constexpr int kVectorWidth = 4;
inline constexpr int kMaxDims = 16;

// Blocks for `work` items of `per_thread` each: at least 1, at most kMaxBlocks.
inline unsigned blocks_for(int64_t work, int64_t per_thread = 1) {
  const int64_t per_block = kThreads * per_thread;
  return static_cast<unsigned>(std::clamp<int64_t>((work + per_block - 1) / per_block, 1, kMaxBlocks));
}

__device__ __forceinline__ int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t thread_count() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// `value` combined over the threads of a kThreads-thread block by `combine(a, b)` (a sum,
// a maximum), in a fixed tree order (so results repeat run to run). Every thread of the
// block must call it; the result is returned to all of them.
template <class T, class Combine>
__device__ T block_reduce(T value, Combine combine) {
  __shared__ T shared[kThreads];
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int step = kThreads / 2; step > 0; step >>= 1) {
    if (threadIdx.x < step) shared[threadIdx.x] = combine(shared[threadIdx.x], shared[threadIdx.x + step]);
    __syncthreads();
  }
  const T result = shared[0];
  __syncthreads();  // the next call may overwrite shared[]
  return result;
}

// The sum of `value` over the threads of a kThreads-thread block (block_reduce's order).
template <class Acc>
__device__ Acc block_sum(Acc value) {
  return block_reduce(value, [](Acc a, Acc b) { return a + b; });
}

template <int N>
struct StridedLayout {
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];

  // Element offsets of row-major element `linear` of the iteration shape, per operand.
  __device__ void offsets(int64_t linear, int64_t (&out)[N]) const {
    for (int k = 0; k < N; ++k) out[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t index = linear % sizes[d];
      linear /= sizes[d];
      for (int k = 0; k < N; ++k) out[k] += index * strides[k][d];
    }
  }
};

// The layout of `operands` broadcast to `shape`, with size-1 dims dropped and
// neighbouring dims merged wherever every operand allows.
template <int N>
StridedLayout<N> make_layout(const Shape& shape, const std::array<const Tensor*, N>& operands) {
  std::array<Shape, N> full;
  for (int k = 0; k < N; ++k) {
    const Tensor& t = *operands[k];
    full[k].assign(shape.size(), 0);
    const size_t lead = shape.size() - t.sizes().size();
    for (size_t i = 0; i < t.sizes().size(); ++i) {
      if (t.sizes()[i] != 1) full[k][lead + i] = t.strides()[i];
    }
  }
  Shape sizes;
  std::array<Shape, N> strides;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !sizes.empty();
    for (int k = 0; k < N && merge; ++k) merge = strides[k].back() == full[k][d] * shape[d];
    if (merge) {
      sizes.back() *= shape[d];
      for (int k = 0; k < N; ++k) strides[k].back() = full[k][d];
    } else {
      sizes.push_back(shape[d]);
      for (int k = 0; k < N; ++k) strides[k].push_back(full[k][d]);
    }
  }
  TS_CHECK(sizes.size() <= static_cast<size_t>(kMaxDims), ShapeError, "CUDA kernels handle at most ", kMaxDims,
           " non-mergeable dims; got the shape ", shape_str(shape));
  StridedLayout<N> layout;
  layout.ndim = static_cast<int>(sizes.size());
  for (int d = 0; d < layout.ndim; ++d) {
    layout.sizes[d] = sizes[d];
    for (int k = 0; k < N; ++k) layout.strides[k][d] = strides[k][d];
  }
  return layout;
}

// True when every operand walks the layout densely (element i at offset i).
template <int N>
bool is_dense(const StridedLayout<N>& layout) {
  if (layout.ndim == 0) return true;
  if (layout.ndim != 1) return false;
  for (int k = 0; k < N; ++k) {
    if (layout.strides[k][0] != 1) return false;
  }
  return true;
}

template <class T, int Width>
struct alignas(sizeof(T) * Width) Pack {
  T value[Width];
};

inline bool aligned_for_vectors(const void* pointer, size_t element_size) {
  return reinterpret_cast<uintptr_t>(pointer) % (element_size * kVectorWidth) == 0;
}

// Loop bodies: `Body` provides
//   __device__ void element(int64_t i)                    dense element i
//   __device__ void vector(int64_t v)                     dense elements [v*W, v*W+W)
//   __device__ void strided(const int64_t (&offsets)[N])  one element of a strided walk
template <class Body>
__global__ void dense_kernel(int64_t n, Body body) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) body.element(i);
}

template <class Body>
__global__ void dense_vector_kernel(int64_t n, Body body) {
  const int64_t vectors = n / kVectorWidth;
  for (int64_t v = thread_index(); v < vectors; v += thread_count()) body.vector(v);
  for (int64_t i = vectors * kVectorWidth + thread_index(); i < n; i += thread_count()) body.element(i);
}

template <int N, class Body>
__global__ void strided_kernel(int64_t n, StridedLayout<N> layout, Body body) {
  int64_t offsets[N];
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    layout.offsets(i, offsets);
    body.strided(offsets);
  }
}

// Runs `body` over `n` elements on `stream`: vectorised when the layout is dense and
// `vectorisable`, element by element when dense, strided otherwise.
template <int N, class Body>
void launch_elementwise(int64_t n, const StridedLayout<N>& layout, bool vectorisable, const Body& body,
                        cudaStream_t stream) {
  if (n == 0) return;
  if (is_dense(layout) && vectorisable) {
    dense_vector_kernel<<<blocks_for(n, kVectorWidth), kThreads, 0, stream>>>(n, body);
    TS_CUDA_CHECK_LAUNCH("dense_vector_kernel");
  } else if (is_dense(layout)) {
    dense_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, body);
    TS_CUDA_CHECK_LAUNCH("dense_kernel");
  } else {
    strided_kernel<N><<<blocks_for(n), kThreads, 0, stream>>>(n, layout, body);
    TS_CUDA_CHECK_LAUNCH("strided_kernel");
  }
}

}  // namespace tessera::cuda
