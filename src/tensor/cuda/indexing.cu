// Indexing on CUDA: tril/triu, index_select and its index_add_, gather and its scatter_add_,
// with the CPU's results bit for bit (cpu/indexing.cpp).
//
// tril/triu, index_select and gather write each output element from one thread. The adds
// own their outputs as on the CPU, so they need no atomics and are deterministic:
// index_add_ gives a thread one column (outer slice, inner position) and adds the rows in
// k order; scatter_add_ gives a thread one line along dim and adds in order along it.
// A bad index cannot throw on the device, and the host does not wait to look: the kernels
// note the first bad position (device_errors.cuh: across blocks, with the launch's last block
// reporting it) and the next host wait on the device throws the CPU's IndexError, naming
// the op, the index and its position, as for embedding and nll_loss (PyTorch's device-side
// asserts surface late the same way). Meanwhile no kernel touches memory out of range:
// index_select and gather write zeros for a bad index, scatter_add_ skips it (the CPU adds
// the good ones too), and index_add_ adds nothing at all (the CPU checks before adding).
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/device_errors.cuh"
#include "tessera/tensor/cuda/device_types.cuh"
#include "tessera/tensor/cuda/launch.cuh"
#include "tessera/tensor/cuda/kernels.h"
#include "tessera/tensor/kernel_shapes.h"

namespace tessera::cuda {

using namespace native;

namespace {

// Element types moved whole, by size: selection does not care what the bits mean.
template <class Body>
void dispatch_bits(DType dtype, Body&& body) {
  switch (element_size(dtype)) {
    case 1: return body.template operator()<uint8_t>();
    case 2: return body.template operator()<uint16_t>();
    case 4: return body.template operator()<uint32_t>();
    default: return body.template operator()<uint64_t>();
  }
}

// ---- tril / triu ----

template <class T>
__global__ void triangle_kernel(const T* x, int64_t n, int64_t rows, int64_t cols, int64_t diagonal, bool lower,
                                T* y) {
  for (int64_t e = thread_index(); e < n; e += thread_count()) {
    const int64_t j = e % cols, i = (e / cols) % rows;
    const bool keep = lower ? j - i <= diagonal : j - i >= diagonal;  // tril : triu
    y[e] = keep ? x[e] : T{0};
  }
}

// ---- index checks on the device ----

// What a launch that may report needs: the device's scratch and record slot, and the
// context its message names (the op, the shapes).
struct IndexReport {
  FirstBadScratch* scratch;
  DeviceErrorRecord* slot;
  uint64_t context;
};

IndexReport index_report(int device, DeviceErrorContext context) {
  return {first_bad_scratch(device), device_error_slot(device), register_error_context(device, std::move(context))};
}

__device__ __forceinline__ bool out_of_range(int64_t i, int64_t size) { return i < 0 || i >= size; }

// Reports the first position of a 1-D index whose value is outside [0, size).
__global__ void check_index_kernel(const int64_t* index, int64_t n, int64_t size, IndexReport report) {
  for (int64_t k = thread_index(); k < n; k += thread_count()) {
    if (out_of_range(index[k], size)) note_bad_position(report.scratch, k);
  }
  finish_bad_positions(report.scratch, [&](int64_t first) {
    report_device_error(report.slot, DeviceErrorCode::index_out_of_range, index[first], first, size, report.context);
  });
}

// Queues the check of a 1-D index; the next host wait throws the CPU's IndexError.
void check_index_values(const Tensor& index, int64_t size, int64_t dim, const Tensor& self, const char* op) {
  const int64_t n = index.numel();
  if (n == 0) return;
  const int device = index.device().index;
  const IndexReport report = index_report(device, {.op = op, .index_shape = index.sizes(), .dim = dim,
                                                   .self_shape = self.sizes()});
  check_index_kernel<<<blocks_for(n), kThreads, 0, compute_stream(device)>>>(
      static_cast<const int64_t*>(index.data_ptr()), n, size, report);
  TS_CUDA_CHECK_LAUNCH("check_index_kernel");
}

// ---- index_select / index_add_ ----

template <class B>
__global__ void index_select_kernel(const B* x, const int64_t* index, int64_t outer, int64_t size, int64_t n,
                                    int64_t inner, B* y) {
  const int64_t total = outer * n * inner;
  for (int64_t e = thread_index(); e < total; e += thread_count()) {
    const int64_t i = e % inner, k = (e / inner) % n, o = e / (inner * n);
    y[e] = out_of_range(index[k], size) ? B{0} : x[(o * size + index[k]) * inner + i];
  }
}

// Adds nothing when any index is out of range (each thread looks at them all first: the
// index is short and cached), so that self is left as it was, as the CPU leaves it.
template <class T>
__global__ void index_add_kernel(T* y, const int64_t* index, const T* source, int64_t outer, int64_t size,
                                 int64_t n, int64_t inner) {
  for (int64_t k = 0; k < n; ++k) {
    if (out_of_range(index[k], size)) return;
  }
  for (int64_t column = thread_index(); column < outer * inner; column += thread_count()) {
    const int64_t o = column / inner, i = column % inner;
    for (int64_t k = 0; k < n; ++k) {
      T& slot = y[(o * size + index[k]) * inner + i];
      slot = store<T>(static_cast<Compute<T>>(load(slot) + load(source[(o * n + k) * inner + i])));
    }
  }
}

// ---- gather / scatter_add_ ----

// GatherLines (kernel_shapes.h) by value, for the kernels.
struct DeviceLines {
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[3][kMaxDims];
  int64_t dim_stride[3];
  int64_t lines, length, self_dim_size;

  __device__ void offsets(int64_t line, int64_t (&out)[3]) const {
    out[0] = out[1] = out[2] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t coordinate = line % sizes[d];
      line /= sizes[d];
      for (int k = 0; k < 3; ++k) out[k] += coordinate * strides[k][d];
    }
  }
};

DeviceLines device_lines(const GatherLines& g, const char* op) {
  TS_CHECK(g.line_sizes.size() <= static_cast<size_t>(kMaxDims), ShapeError, op, ": CUDA handles at most ", kMaxDims,
           " dims besides the indexed one");
  DeviceLines d;
  d.ndim = static_cast<int>(g.line_sizes.size());
  for (int i = 0; i < d.ndim; ++i) {
    d.sizes[i] = g.line_sizes[i];
    for (int k = 0; k < 3; ++k) d.strides[k][i] = g.strides[k][i];
  }
  for (int k = 0; k < 3; ++k) d.dim_stride[k] = g.dim_stride[k];
  d.lines = g.lines;
  d.length = g.length;
  d.self_dim_size = g.self_dim_size;
  return d;
}

// The index value at walk position `position` (line * length + j), for the report.
__device__ int64_t index_at(const int64_t* index, const DeviceLines& g, int64_t position) {
  int64_t at[3];
  g.offsets(position / g.length, at);
  return index[at[0] + (position % g.length) * g.dim_stride[0]];
}

template <class B>
__global__ void gather_kernel(const B* x, const int64_t* index, DeviceLines g, B* y, IndexReport report) {
  const int64_t total = g.lines * g.length;
  for (int64_t e = thread_index(); e < total; e += thread_count()) {
    const int64_t line = e / g.length, j = e % g.length;
    int64_t at[3];
    g.offsets(line, at);
    const int64_t i = index[at[0] + j * g.dim_stride[0]];
    if (out_of_range(i, g.self_dim_size)) {
      note_bad_position(report.scratch, e);
      y[at[2] + j * g.dim_stride[2]] = B{0};
      continue;
    }
    y[at[2] + j * g.dim_stride[2]] = x[at[1] + i * g.dim_stride[1]];
  }
  finish_bad_positions(report.scratch, [&](int64_t first) {
    report_device_error(report.slot, DeviceErrorCode::gather_index, index_at(index, g, first), first, g.self_dim_size,
                        report.context);
  });
}

template <class T>
__global__ void scatter_add_kernel(T* y, const int64_t* index, const T* src, DeviceLines g, IndexReport report) {
  for (int64_t line = thread_index(); line < g.lines; line += thread_count()) {
    int64_t at[3];
    g.offsets(line, at);
    for (int64_t j = 0; j < g.length; ++j) {
      const int64_t i = index[at[0] + j * g.dim_stride[0]];
      if (out_of_range(i, g.self_dim_size)) {
        note_bad_position(report.scratch, line * g.length + j);
        continue;
      }
      T& slot = y[at[1] + i * g.dim_stride[1]];
      slot = store<T>(static_cast<Compute<T>>(load(slot) + load(src[at[2] + j * g.dim_stride[2]])));
    }
  }
  finish_bad_positions(report.scratch, [&](int64_t first) {
    report_device_error(report.slot, DeviceErrorCode::gather_index, index_at(index, g, first), first, g.self_dim_size,
                        report.context);
  });
}

}  // namespace

Tensor triangle(const Tensor& self_in, int64_t diagonal, Triangle part) {
  const char* op = triangle_name(part);
  check_triangle(self_in, op);
  DeviceGuard guard = enter_cuda_device(self_in, op);
  Tensor self = contiguous(self_in);
  Tensor out = empty(self.sizes(), self.dtype(), self.device());
  const int64_t n = self.numel();
  if (n == 0) return out;
  dispatch_bits(self.dtype(), [&]<class B>() {  // zero bits are 0 in every dtype (false, +0.0)
    triangle_kernel<B><<<blocks_for(n), kThreads, 0, compute_stream(self.device().index)>>>(
        static_cast<const B*>(self.data_ptr()), n, self.size(-2), self.size(-1), diagonal, part == Triangle::lower,
        static_cast<B*>(out.data_ptr()));
    TS_CUDA_CHECK_LAUNCH("triangle_kernel");
  });
  return out;
}

Tensor index_select(const Tensor& self_in, int64_t dim, const Tensor& index_in) {
  const char* op = "index_select";
  const IndexGeometry g = index_select_geometry(self_in, dim, index_in, op);
  DeviceGuard guard = enter_cuda_device(self_in, op);
  Tensor self = contiguous(self_in), index = contiguous(index_in);
  const AxisLayout& l = g.layout;
  check_index_values(index, l.size, g.dim, self, op);
  Tensor out = empty(g.out_shape, self.dtype(), self.device());
  const int64_t total = out.numel();
  if (total == 0) return out;
  dispatch_bits(self.dtype(), [&]<class B>() {
    index_select_kernel<B><<<blocks_for(total), kThreads, 0, compute_stream(self.device().index)>>>(
        static_cast<const B*>(self.data_ptr()), static_cast<const int64_t*>(index.data_ptr()), l.outer, l.size,
        index.numel(), l.inner, static_cast<B*>(out.data_ptr()));
    TS_CUDA_CHECK_LAUNCH("index_select_kernel");
  });
  return out;
}

void index_add_(Tensor& self, int64_t dim, const Tensor& index_in, const Tensor& source_in) {
  const char* op = "index_add";
  const IndexGeometry g = check_index_add(self, dim, index_in, source_in);
  DeviceGuard guard = enter_cuda_device(self, op);
  Tensor target = contiguous(self), index = contiguous(index_in), source = contiguous(source_in);
  const AxisLayout& l = g.layout;
  check_index_values(index, l.size, g.dim, self, op);
  const int64_t columns = l.outer * l.inner;
  if (columns == 0 || index.numel() == 0) return;
  dispatch_numeric_on("CUDA", target.dtype(), op, [&]<class T>() {
    index_add_kernel<T><<<blocks_for(columns), kThreads, 0, compute_stream(self.device().index)>>>(
        static_cast<T*>(target.data_ptr()), static_cast<const int64_t*>(index.data_ptr()),
        static_cast<const T*>(source.data_ptr()), l.outer, l.size, index.numel(), l.inner);
    TS_CUDA_CHECK_LAUNCH("index_add_kernel");
  });
  if (!target.is_same(self)) native::copy_(self, target);
}

Tensor gather(const Tensor& self, int64_t dim, const Tensor& index) {
  const char* op = "gather";
  const int64_t d = check_gather_index(self, dim, index, op);
  DeviceGuard guard = enter_cuda_device(self, op);
  Tensor out = empty(index.sizes(), self.dtype(), self.device());
  const GatherLines g = gather_lines(index, self, out, d);
  const int64_t total = g.lines * g.length;
  if (total == 0) return out;
  const int device = self.device().index;
  const IndexReport report = index_report(device, {.op = op, .index_shape = index.sizes(), .dim = d,
                                                   .self_shape = self.sizes()});
  dispatch_bits(self.dtype(), [&]<class B>() {
    gather_kernel<B><<<blocks_for(total), kThreads, 0, compute_stream(device)>>>(
        static_cast<const B*>(self.data_ptr()), static_cast<const int64_t*>(index.data_ptr()), device_lines(g, op),
        static_cast<B*>(out.data_ptr()), report);
    TS_CUDA_CHECK_LAUNCH("gather_kernel");
  });
  return out;
}

void scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const char* op = "scatter_add";
  const int64_t d = check_scatter_add(self, dim, index, src);
  DeviceGuard guard = enter_cuda_device(self, op);
  Tensor target = contiguous(self);
  const GatherLines g = gather_lines(index, target, src, d);
  const int64_t total = g.lines * g.length;
  if (total == 0) return;
  const int device = self.device().index;
  const IndexReport report = index_report(device, {.op = op, .index_shape = index.sizes(), .dim = d,
                                                   .self_shape = self.sizes()});
  dispatch_numeric_on("CUDA", target.dtype(), op, [&]<class T>() {
    scatter_add_kernel<T><<<blocks_for(g.lines), kThreads, 0, compute_stream(device)>>>(
        static_cast<T*>(target.data_ptr()), static_cast<const int64_t*>(index.data_ptr()),
        static_cast<const T*>(src.data_ptr()), device_lines(g, op), report);
    TS_CUDA_CHECK_LAUNCH("scatter_add_kernel");
  });
  if (!target.is_same(self)) native::copy_(self, target);
}

}  // namespace tessera::cuda
