// Strided element loops shared by the CPU kernels.
//
// An iteration is an output shape plus, for each operand, element strides broadcast to
// that shape (stride 0 on broadcast dims). Dims are coalesced first, so contiguous
// operands become one flat row and the inner loop is a plain vectorisable loop. Rows are
// split across OpenMP threads; a single long row is split into chunks.
#pragma once

#include <omp.h>

#include <array>
#include <cstdint>

#include "tessera/tensor/tensor.h"

namespace tessera::cpu {

// Below this many elements a loop runs on one thread: waking threads costs more.
inline constexpr int64_t kParallelGrain = 32768;

template <size_t N>
struct StridedIteration {
  Shape sizes;                   // coalesced output shape (at least one dim)
  std::array<Shape, N> strides;  // per operand, one stride per dim of `sizes`
  int64_t numel = 0;
};

// Strides of `tensor` viewed with `shape` (right-aligned, broadcast dims get stride 0).
inline Shape broadcast_strides(const Tensor& tensor, const Shape& shape) {
  Shape strides(shape.size(), 0);
  size_t lead = shape.size() - tensor.sizes().size();
  for (size_t i = 0; i < tensor.sizes().size(); ++i) {
    if (tensor.sizes()[i] != 1) strides[lead + i] = tensor.strides()[i];
  }
  return strides;
}

template <size_t N>
StridedIteration<N> make_iteration(const Shape& shape, const std::array<const Tensor*, N>& operands) {
  StridedIteration<N> it;
  it.numel = shape_numel(shape);
  std::array<Shape, N> full;
  for (size_t k = 0; k < N; ++k) full[k] = broadcast_strides(*operands[k], shape);
  // Drop size-1 dims, then merge neighbours that are contiguous for every operand.
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !it.sizes.empty();
    for (size_t k = 0; k < N && merge; ++k) merge = it.strides[k].back() == full[k][d] * shape[d];
    if (merge) {
      it.sizes.back() *= shape[d];
      for (size_t k = 0; k < N; ++k) it.strides[k].back() = full[k][d];
    } else {
      it.sizes.push_back(shape[d]);
      for (size_t k = 0; k < N; ++k) it.strides[k].push_back(full[k][d]);
    }
  }
  if (it.sizes.empty()) {
    it.sizes.push_back(1);
    for (size_t k = 0; k < N; ++k) it.strides[k].push_back(0);
  }
  return it;
}

// Calls row(offsets, count, inner_strides) for every inner row (or chunk of one), where
// offsets are element offsets from each operand's base pointer.
template <size_t N, class Row>
void for_each_row(const StridedIteration<N>& it, Row&& row) {
  if (it.numel == 0) return;
  const size_t ndim = it.sizes.size();
  const int64_t inner = it.sizes.back();
  const int64_t rows = it.numel / inner;
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = it.strides[k].back();

  const int threads = it.numel >= kParallelGrain ? omp_get_max_threads() : 1;
  // Split long rows when there are too few rows to share between threads.
  const int64_t chunk = (rows < threads * 4) ? std::max<int64_t>(kParallelGrain / 4, (inner + threads - 1) / threads)
                                             : inner;
  const int64_t chunks_per_row = (inner + chunk - 1) / chunk;
  const int64_t units = rows * chunks_per_row;

#pragma omp parallel for schedule(static) if (threads > 1)
  for (int64_t unit = 0; unit < units; ++unit) {
    int64_t r = unit / chunks_per_row;
    int64_t begin = (unit % chunks_per_row) * chunk;
    int64_t count = std::min(chunk, inner - begin);
    std::array<int64_t, N> offsets{};
    for (size_t d = ndim - 1; d-- > 0;) {
      int64_t index = r % it.sizes[d];
      r /= it.sizes[d];
      for (size_t k = 0; k < N; ++k) offsets[k] += index * it.strides[k][d];
    }
    for (size_t k = 0; k < N; ++k) offsets[k] += begin * inner_strides[k];
    row(offsets, count, inner_strides);
  }
}

}  // namespace tessera::cpu
