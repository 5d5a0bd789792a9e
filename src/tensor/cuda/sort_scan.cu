// Ordering and scans on CUDA: topk, cumsum, searchsorted, with the CPU's results
// (cpu/sort_scan.cpp) bit for bit.
//
// topk moves dim last (a contiguous copy when it is not), turns each value into its order
// key (order_key.h: NaN largest, -0 == +0; inverted for largest), and sorts every line with
// CUB's stable segmented sort on those integer keys, carrying positions: equal values keep
// position order, as the CPU's sort on (key, position) orders them. The first k of each
// line are gathered back and moved to dim. cumsum runs one thread per line, adding in the
// CPU's order and precision (double for floats), so the two agree exactly; searchsorted
// runs a binary search per value.
#include <cub/device/device_segmented_sort.cuh>

#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/device_types.cuh"
#include "tessera/tensor/cuda/launch.cuh"
#include "tessera/tensor/cuda/kernels.h"
#include "tessera/tensor/kernel_shapes.h"
#include "tessera/tensor/order_key.h"

namespace tessera::cuda {

using namespace native;

namespace {

// ---- topk ----

template <class T, class Key>
__global__ void order_keys_kernel(const T* x, int64_t n, int64_t size, bool largest, Key* keys, int64_t* positions) {
  for (int64_t e = thread_index(); e < n; e += thread_count()) {
    const Key key = order_key::of(x[e]);
    keys[e] = largest ? static_cast<Key>(~key) : key;  // ascending keys either way
    positions[e] = e % size;
  }
}

template <class T>
__global__ void take_first_kernel(const T* lines, const int64_t* sorted_positions, int64_t count, int64_t size,
                                  int64_t k, T* values, int64_t* indices) {
  for (int64_t e = thread_index(); e < count; e += thread_count()) {
    const int64_t line = e / k, j = e % k;
    const int64_t position = sorted_positions[line * size + j];
    indices[e] = position;
    values[e] = lines[line * size + position];
  }
}

template <class T>
void topk_lines(const Tensor& lines, int64_t line_count, int64_t size, int64_t k, bool largest, Tensor& values,
                Tensor& indices) {
  using Key = order_key::Key<T>;
  const Device device = lines.device();
  cudaStream_t stream = compute_stream(device.index);
  const int64_t n = line_count * size;
  const int64_t key_bytes = n * static_cast<int64_t>(sizeof(Key));
  Tensor keys = empty({key_bytes}, DType::u8, device), sorted_keys = empty({key_bytes}, DType::u8, device);
  Tensor positions = empty({n}, DType::i64, device), sorted_positions = empty({n}, DType::i64, device);
  order_keys_kernel<T, Key><<<blocks_for(n), kThreads, 0, stream>>>(
      static_cast<const T*>(lines.data_ptr()), n, size, largest, static_cast<Key*>(keys.data_ptr()),
      static_cast<int64_t*>(positions.data_ptr()));
  TS_CUDA_CHECK_LAUNCH("order_keys_kernel");
  // Segment s is [offsets[s], offsets[s + 1]).
  Tensor offsets = arange(0, static_cast<double>(n + size) - 0.5, static_cast<double>(size), DType::i64, device);
  const auto* begin = static_cast<const int64_t*>(offsets.data_ptr());
  size_t scratch_bytes = 0;
  TS_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(
      nullptr, scratch_bytes, static_cast<const Key*>(keys.data_ptr()), static_cast<Key*>(sorted_keys.data_ptr()),
      static_cast<const int64_t*>(positions.data_ptr()), static_cast<int64_t*>(sorted_positions.data_ptr()), n,
      line_count, begin, begin + 1, stream));
  Tensor scratch = empty({static_cast<int64_t>(scratch_bytes) + 1}, DType::u8, device);
  TS_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(
      scratch.data_ptr(), scratch_bytes, static_cast<const Key*>(keys.data_ptr()),
      static_cast<Key*>(sorted_keys.data_ptr()), static_cast<const int64_t*>(positions.data_ptr()),
      static_cast<int64_t*>(sorted_positions.data_ptr()), n, line_count, begin, begin + 1, stream));
  const int64_t count = line_count * k;
  take_first_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(
      static_cast<const T*>(lines.data_ptr()), static_cast<const int64_t*>(sorted_positions.data_ptr()), count, size,
      k, static_cast<T*>(values.data_ptr()), static_cast<int64_t*>(indices.data_ptr()));
  TS_CUDA_CHECK_LAUNCH("take_first_kernel");
}

// ---- cumsum ----

template <class In, class Out, class Acc>
__global__ void cumsum_kernel(const In* x, int64_t outer, int64_t size, int64_t inner, bool reverse, Out* y) {
  for (int64_t line = thread_index(); line < outer * inner; line += thread_count()) {
    const int64_t o = line / inner, i = line % inner;
    Acc acc = 0;
    for (int64_t step = 0; step < size; ++step) {
      const int64_t j = reverse ? size - 1 - step : step;
      const int64_t at = (o * size + j) * inner + i;
      acc += static_cast<Acc>(x[at]);
      y[at] = static_cast<Out>(acc);
    }
  }
}

// ---- searchsorted ----

template <class T>
__global__ void searchsorted_kernel(const T* sorted, const T* values, int64_t total, int64_t per_row, int64_t length,
                                    bool shared, bool right, int64_t* out) {
  for (int64_t p = thread_index(); p < total; p += thread_count()) {
    const T* row = sorted + (shared ? 0 : (p / per_row) * length);
    const T v = values[p];
    int64_t low = 0, high = length;  // first position whose element is >= v (right: > v)
    while (low < high) {
      const int64_t middle = low + (high - low) / 2;
      const bool before = right ? !(v < row[middle]) : row[middle] < v;
      if (before) low = middle + 1; else high = middle;
    }
    out[p] = low;
  }
}

}  // namespace

std::tuple<Tensor, Tensor> topk(const Tensor& self, int64_t k, int64_t dim, bool largest) {
  const AxisLayout layout = check_topk(self, k, dim);
  DeviceGuard guard = enter_cuda_device(self, "topk");
  const Shape shape = topk_shape(self, k, dim);
  Tensor values = empty(shape, self.dtype(), self.device());
  Tensor indices = empty(shape, DType::i64, self.device());
  if (k == 0 || values.numel() == 0) return {values, indices};
  // Lines along dim, dim last: [outer, inner, size].
  const int64_t d = self.dim() == 0 ? 0 : wrap_dim(dim, self.dim(), "topk");
  Tensor lines = self.dim() == 0 ? view(self, {1}) : contiguous(transpose(self, d, -1));
  Tensor line_values = empty({layout.outer * layout.inner, k}, self.dtype(), self.device());
  Tensor line_indices = empty({layout.outer * layout.inner, k}, DType::i64, self.device());
  dispatch_numeric_on("CUDA", self.dtype(), "topk", [&]<class T>() {
    topk_lines<T>(lines, layout.outer * layout.inner, layout.size, k, largest, line_values, line_indices);
  });
  // Back to self's order of dims: the lines were self with dims d and last swapped.
  Shape swapped = shape;
  if (!swapped.empty()) std::swap(swapped[d], swapped.back());
  Tensor v = view(line_values, swapped), ix = view(line_indices, swapped);
  if (!shape.empty()) {
    v = transpose(v, d, -1);
    ix = transpose(ix, d, -1);
  }
  native::copy_(values, v);
  native::copy_(indices, ix);
  return {values, indices};
}

Tensor cumsum(const Tensor& self_in, int64_t dim, bool reverse) {
  const DType out_dtype = cumsum_dtype(self_in);
  DeviceGuard guard = enter_cuda_device(self_in, "cumsum");
  Tensor self = contiguous(self_in);
  const AxisLayout l = axis_layout(self.sizes(), dim, "cumsum");
  Tensor out = empty(self.sizes(), out_dtype, self.device());
  if (out.numel() == 0) return out;
  cudaStream_t stream = compute_stream(self.device().index);
  const unsigned blocks = blocks_for(l.outer * l.inner);
  auto launch = [&]<class In, class Out, class Acc>() {
    cumsum_kernel<In, Out, Acc><<<blocks, kThreads, 0, stream>>>(static_cast<const In*>(self.data_ptr()), l.outer,
                                                                 l.size, l.inner, reverse,
                                                                 static_cast<Out*>(out.data_ptr()));
    TS_CUDA_CHECK_LAUNCH("cumsum_kernel");
  };
  switch (self.dtype()) {  // the CPU's accumulators: double for floats, int64 otherwise
    case DType::f32: launch.template operator()<float, float, double>(); break;
    case DType::f64: launch.template operator()<double, double, double>(); break;
    case DType::i64: launch.template operator()<int64_t, int64_t, int64_t>(); break;
    case DType::u8: launch.template operator()<uint8_t, int64_t, int64_t>(); break;
    case DType::boolean: launch.template operator()<bool, int64_t, int64_t>(); break;
    default: throw DTypeError(detail::concat("cumsum: not implemented for ", dtype_name(self.dtype()), " on CUDA"));
  }
  return out;
}

Tensor searchsorted(const Tensor& sorted_in, const Tensor& values_in, bool right) {
  const SearchLayout layout = check_searchsorted(sorted_in, values_in);
  DeviceGuard guard = enter_cuda_device(sorted_in, "searchsorted");
  Tensor sorted = contiguous(sorted_in), values = contiguous(values_in);
  Tensor out = empty(values.sizes(), DType::i64, values.device());
  const int64_t total = layout.rows * layout.per_row;
  if (total == 0) return out;
  dispatch_numeric_on("CUDA", sorted.dtype(), "searchsorted", [&]<class T>() {
    searchsorted_kernel<T><<<blocks_for(total), kThreads, 0, compute_stream(sorted.device().index)>>>(
        static_cast<const T*>(sorted.data_ptr()), static_cast<const T*>(values.data_ptr()), total, layout.per_row,
        layout.length, layout.shared, right, static_cast<int64_t*>(out.data_ptr()));
    TS_CUDA_CHECK_LAUNCH("searchsorted_kernel");
  });
  return out;
}

}  // namespace tessera::cuda
