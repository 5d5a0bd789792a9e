// Indexing on the CPU: tril/triu, index_select and its index_add_, gather and its
// scatter_add_.
//
// index_select/index_add_ read the tensor as [outer, size, inner] along dim; gather and
// scatter_add_ walk index's elements as lines along dim (kernel_shapes.h: GatherLines).
// The adds are deterministic at any thread count: threads own disjoint outputs (index_add_:
// a block of columns, scatter_add_: whole lines) and each output adds its terms in order.
// An index out of range is an IndexError naming it, its position and the dim's size; the
// parallel loops only note the first one (exceptions cannot leave an OpenMP region).
#include <cstring>

#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cpu {

using namespace native;

namespace {

template <bool Lower>
Tensor triangle(const Tensor& self_in, int64_t diagonal, const char* op) {
  check_triangle(self_in, op);
  check_cpu(self_in, op);
  Tensor self = contiguous(self_in);
  Tensor out = empty(self.sizes(), self.dtype(), self.device());
  const int64_t rows = self.size(-2), cols = self.size(-1);
  const int64_t all_rows = rows == 0 ? 0 : self.numel() / cols;
  dispatch_all(self.dtype(), [&]<class T>() {
    const T* x = static_cast<const T*>(self.data_ptr());
    T* y = static_cast<T*>(out.data_ptr());
#pragma omp parallel for if (self.numel() > cpu::kParallelGrain)
    for (int64_t r = 0; r < all_rows; ++r) {
      const int64_t i = r % rows;
      // Row i keeps columns j with j - i <= diagonal (tril) or j - i >= diagonal (triu).
      const int64_t split = std::clamp<int64_t>(i + diagonal + (Lower ? 1 : 0), 0, cols);
      const T* in = x + r * cols;
      T* o = y + r * cols;
      for (int64_t j = 0; j < cols; ++j) o[j] = ((j < split) == Lower) ? in[j] : T{};
    }
  });
  return out;
}

// The first position of a 1-D index outside [0, size), or -1.
int64_t first_bad_index(const Tensor& index, int64_t size) {
  const int64_t* idx = static_cast<const int64_t*>(index.data_ptr());
  for (int64_t k = 0; k < index.numel(); ++k) {
    if (idx[k] < 0 || idx[k] >= size) return k;
  }
  return -1;
}

void check_index_values(const Tensor& index, int64_t size, int64_t dim, const Tensor& self, const char* op) {
  const int64_t bad = first_bad_index(index, size);
  if (bad >= 0) throw_index_out_of_range(op, static_cast<const int64_t*>(index.data_ptr())[bad], bad, dim, size, self.sizes());
}

// Element offsets of line `line`'s start in each GatherLines operand.
std::array<int64_t, 3> line_offsets(const GatherLines& g, int64_t line) {
  std::array<int64_t, 3> offsets{};
  for (size_t d = g.line_sizes.size(); d-- > 0;) {
    const int64_t coordinate = line % g.line_sizes[d];
    line /= g.line_sizes[d];
    for (size_t k = 0; k < 3; ++k) offsets[k] += coordinate * g.strides[k][d];
  }
  return offsets;
}

// Calls visit(offsets, j, i) for element j of every line whose index i is in range, the
// lines in parallel (each line touches only its own slots of the gathered or scattered
// dim). Returns the flat position (line * length + j) of the first index out of range, or
// lines * length when there is none.
template <class Visit>
int64_t for_each_index(const GatherLines& g, const Tensor& index, Visit&& visit) {
  const auto* idx = static_cast<const int64_t*>(index.data_ptr());
  int64_t bad = g.lines * g.length;
#pragma omp parallel for reduction(min : bad) if (index.numel() > cpu::kParallelGrain)
  for (int64_t line = 0; line < g.lines; ++line) {
    const std::array<int64_t, 3> at = line_offsets(g, line);
    for (int64_t j = 0; j < g.length; ++j) {
      const int64_t i = idx[at[0] + j * g.dim_stride[0]];
      if (i < 0 || i >= g.self_dim_size) {
        bad = std::min(bad, line * g.length + j);
        continue;
      }
      visit(at, j, i);
    }
  }
  return bad;
}

}  // namespace

// The part as a template argument: the row loop's select then vectorises (a run-time
// flag in it halves triu's speed).
Tensor triangle(const Tensor& self, int64_t diagonal, Triangle part) {
  const char* op = triangle_name(part);
  return part == Triangle::lower ? triangle<true>(self, diagonal, op) : triangle<false>(self, diagonal, op);
}

Tensor index_select(const Tensor& self_in, int64_t dim, const Tensor& index_in) {
  const char* op = "index_select";
  const IndexGeometry g = index_select_geometry(self_in, dim, index_in, op);
  check_cpu(self_in, op);
  Tensor self = contiguous(self_in), index = contiguous(index_in);
  const AxisLayout& l = g.layout;
  check_index_values(index, l.size, g.dim, self, op);
  Tensor out = empty(g.out_shape, self.dtype(), self.device());
  const int64_t n = index.numel();
  const size_t row_bytes = static_cast<size_t>(l.inner) * self.element_size();
  const auto* idx = static_cast<const int64_t*>(index.data_ptr());
  const auto* x = static_cast<const char*>(self.data_ptr());
  auto* y = static_cast<char*>(out.data_ptr());
  if (row_bytes == 0) return out;
  // Rows of `inner` elements are copied whole, whatever the dtype.
#pragma omp parallel for if (out.numel() > cpu::kParallelGrain)
  for (int64_t row = 0; row < l.outer * n; ++row) {
    const int64_t o = row / n, k = row % n;
    std::memcpy(y + row * row_bytes, x + (o * l.size + idx[k]) * row_bytes, row_bytes);
  }
  return out;
}

void index_add_(Tensor& self, int64_t dim, const Tensor& index_in, const Tensor& source_in) {
  const char* op = "index_add";
  const IndexGeometry g = check_index_add(self, dim, index_in, source_in);
  check_cpu(self, op);
  Tensor target = contiguous(self), index = contiguous(index_in), source = contiguous(source_in);
  const AxisLayout& l = g.layout;
  check_index_values(index, l.size, g.dim, self, op);
  const int64_t n = index.numel();
  dispatch_numeric(target.dtype(), op, [&]<class T>() {
    T* y = static_cast<T*>(target.data_ptr());
    const T* src = static_cast<const T*>(source.data_ptr());
    const auto* idx = static_cast<const int64_t*>(index.data_ptr());
    // Each task owns a block of columns of one outer slice and adds the rows in k order.
    constexpr int64_t kBlock = 512;
    const int64_t blocks = (l.inner + kBlock - 1) / kBlock;
#pragma omp parallel for if (source.numel() > cpu::kParallelGrain && l.outer * blocks > 1)
    for (int64_t task = 0; task < l.outer * blocks; ++task) {
      const int64_t o = task / blocks;
      const int64_t begin = (task % blocks) * kBlock, end = std::min(l.inner, begin + kBlock);
      for (int64_t k = 0; k < n; ++k) {
        T* out_row = y + (o * l.size + idx[k]) * l.inner;
        const T* in_row = src + (o * n + k) * l.inner;
        for (int64_t i = begin; i < end; ++i) out_row[i] = static_cast<T>(out_row[i] + in_row[i]);
      }
    }
  });
  if (!target.is_same(self)) native::copy_(self, target);
}

Tensor gather(const Tensor& self, int64_t dim, const Tensor& index) {
  const char* op = "gather";
  const int64_t d = check_gather_index(self, dim, index, op);
  check_cpu(self, op);
  Tensor out = empty(index.sizes(), self.dtype(), self.device());
  const GatherLines g = gather_lines(index, self, out, d);
  int64_t bad = 0;
  dispatch_all(self.dtype(), [&]<class T>() {
    const T* x = static_cast<const T*>(self.data_ptr());
    T* y = static_cast<T*>(out.data_ptr());
    bad = for_each_index(g, index, [&](const std::array<int64_t, 3>& at, int64_t j, int64_t i) {
      y[at[2] + j * g.dim_stride[2]] = x[at[1] + i * g.dim_stride[1]];
    });
  });
  if (bad < g.lines * g.length) throw_bad_gather_index(index, g, bad, d, self, op);
  return out;
}

void scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const char* op = "scatter_add";
  const int64_t d = check_scatter_add(self, dim, index, src);
  check_cpu(self, op);
  Tensor target = contiguous(self);
  const GatherLines g = gather_lines(index, target, src, d);
  int64_t bad = 0;
  dispatch_numeric(target.dtype(), op, [&]<class T>() {
    T* y = static_cast<T*>(target.data_ptr());
    const T* x = static_cast<const T*>(src.data_ptr());
    bad = for_each_index(g, index, [&](const std::array<int64_t, 3>& at, int64_t j, int64_t i) {
      T& slot = y[at[1] + i * g.dim_stride[1]];
      slot = static_cast<T>(slot + x[at[2] + j * g.dim_stride[2]]);
    });
  });
  if (bad < g.lines * g.length) throw_bad_gather_index(index, g, bad, d, self, op);
  if (!target.is_same(self)) native::copy_(self, target);
}

}  // namespace tessera::cpu
