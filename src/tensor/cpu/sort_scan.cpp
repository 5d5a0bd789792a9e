// Ordering and scans on the CPU: topk, cumsum, searchsorted.
//
// Each reads its input as [outer, size, inner] along dim (kernel_shapes.h: AxisLayout) and
// works line by line, a line per task, so results do not depend on the thread count.
// topk sorts order keys (order_key.h: NaN largest, -0 == +0) with the position as the tie
// break, exactly as the CUDA kernel's stable sort orders them. cumsum accumulates floats in
// double, as PyTorch's CPU kernel does.
#include <algorithm>
#include <numeric>
#include <vector>

#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/kernel_shapes.h"
#include "tessera/tensor/order_key.h"

namespace tessera::cpu {

using namespace native;

namespace {

template <class T>
void topk_lines(const Tensor& self, const AxisLayout& l, int64_t k, bool largest, Tensor& values, Tensor& indices) {
  using Key = order_key::Key<T>;
  const T* x = static_cast<const T*>(self.data_ptr());
  T* v = values.data_ptr<T>();
  int64_t* ix = indices.data_ptr<int64_t>();
  const int64_t lines = l.outer * l.inner;
#pragma omp parallel if (lines > 1 && lines * l.size > cpu::kParallelGrain)
  {
    std::vector<std::pair<Key, int64_t>> line(static_cast<size_t>(l.size));
#pragma omp for
    for (int64_t t = 0; t < lines; ++t) {
      const int64_t o = t / l.inner, i = t % l.inner;
      const T* in = x + o * l.size * l.inner + i;
      for (int64_t j = 0; j < l.size; ++j) {
        const Key key = order_key::of(in[j * l.inner]);
        line[j] = {largest ? static_cast<Key>(~key) : key, j};  // ascending keys either way
      }
      std::partial_sort(line.begin(), line.begin() + k, line.end());  // (key, position): ties by position
      for (int64_t j = 0; j < k; ++j) {
        const int64_t at = (o * k + j) * l.inner + i;
        ix[at] = line[j].second;
        v[at] = in[line[j].second * l.inner];
      }
    }
  }
}

template <class In, class Out, class Acc>
void cumsum_lines(const Tensor& self, const AxisLayout& l, bool reverse, Tensor& out) {
  const In* x = static_cast<const In*>(self.data_ptr());
  Out* y = out.data_ptr<Out>();
  // A task is one outer slice and a block of columns; it runs down the dim in order.
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (l.inner + kBlock - 1) / kBlock;
#pragma omp parallel for if (l.outer * l.size * l.inner > cpu::kParallelGrain && l.outer * blocks > 1)
  for (int64_t task = 0; task < l.outer * blocks; ++task) {
    const int64_t o = task / blocks;
    const int64_t begin = (task % blocks) * kBlock, end = std::min(l.inner, begin + kBlock);
    Acc acc[kBlock] = {};
    for (int64_t step = 0; step < l.size; ++step) {
      const int64_t j = reverse ? l.size - 1 - step : step;
      const int64_t row = (o * l.size + j) * l.inner;
      for (int64_t i = begin; i < end; ++i) {
        acc[i - begin] += static_cast<Acc>(x[row + i]);
        y[row + i] = static_cast<Out>(acc[i - begin]);
      }
    }
  }
}

}  // namespace

std::tuple<Tensor, Tensor> topk(const Tensor& self_in, int64_t k, int64_t dim, bool largest) {
  const AxisLayout layout = check_topk(self_in, k, dim);
  check_cpu(self_in, "topk");
  Tensor self = contiguous(self_in);
  const Shape shape = topk_shape(self, k, dim);
  Tensor values = empty(shape, self.dtype(), self.device());
  Tensor indices = empty(shape, DType::i64, self.device());
  if (k == 0 || values.numel() == 0) return {values, indices};
  dispatch_numeric(self.dtype(), "topk", [&]<class T>() { topk_lines<T>(self, layout, k, largest, values, indices); });
  return {values, indices};
}

Tensor cumsum(const Tensor& self_in, int64_t dim, bool reverse) {
  const DType out_dtype = cumsum_dtype(self_in);
  check_cpu(self_in, "cumsum");
  Tensor self = contiguous(self_in);
  const AxisLayout layout = axis_layout(self.sizes(), dim, "cumsum");
  Tensor out = empty(self.sizes(), out_dtype, self.device());
  if (out.numel() == 0) return out;
  dispatch_numeric_or_bool(self.dtype(), "cumsum", [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) {
      cumsum_lines<T, T, double>(self, layout, reverse, out);
    } else {
      cumsum_lines<T, int64_t, int64_t>(self, layout, reverse, out);
    }
  });
  return out;
}

Tensor searchsorted(const Tensor& sorted_in, const Tensor& values_in, bool right) {
  const SearchLayout layout = check_searchsorted(sorted_in, values_in);
  check_cpu(sorted_in, "searchsorted");
  Tensor sorted = contiguous(sorted_in), values = contiguous(values_in);
  Tensor out = empty(values.sizes(), DType::i64, values.device());
  dispatch_numeric(sorted.dtype(), "searchsorted", [&]<class T>() {
    const T* s = static_cast<const T*>(sorted.data_ptr());
    const T* v = static_cast<const T*>(values.data_ptr());
    int64_t* o = out.data_ptr<int64_t>();
    const int64_t total = layout.rows * layout.per_row;
#pragma omp parallel for if (total > cpu::kParallelGrain)
    for (int64_t p = 0; p < total; ++p) {
      const T* row = s + (layout.shared ? 0 : (p / layout.per_row) * layout.length);
      const T* end = row + layout.length;
      o[p] = (right ? std::upper_bound(row, end, v[p]) : std::lower_bound(row, end, v[p])) - row;
    }
  });
  return out;
}

}  // namespace tessera::cpu
