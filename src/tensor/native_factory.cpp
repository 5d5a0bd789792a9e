// Allocation and filling of new tensors.
#include <cmath>

#include "tessera/tensor/native.h"

namespace tessera::native {

Tensor empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t s : shape) TS_CHECK(s >= 0, ShapeError, "empty: negative size in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(shape_numel(shape)) * element_size(dtype), device);
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor empty_pinned(const Shape& shape, DType dtype) {
  for (int64_t s : shape) TS_CHECK(s >= 0, ShapeError, "empty_pinned: negative size in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage =
      std::make_shared<Storage>(static_cast<size_t>(shape_numel(shape)) * element_size(dtype), Device::cpu(), true);
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor empty_like(const Tensor& like) { return empty(like.sizes(), like.dtype(), like.device()); }

Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor out = empty(shape, dtype, device);
  fill_(out, value);
  return out;
}

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  TS_CHECK(step != 0, ValueError, "arange: step must be nonzero");
  double span = (end - start) / step;
  int64_t count = span > 0 ? static_cast<int64_t>(std::ceil(span)) : 0;
  Tensor host = empty({count}, dtype, Device::cpu());
  dispatch_numeric(dtype, "arange", [&]<class T>() {
    T* data = host.data_ptr<T>();
    for (int64_t i = 0; i < count; ++i) data[i] = static_cast<T>(start + static_cast<double>(i) * step);
  });
  return device.is_cpu() ? host : to_device(host, device);
}

namespace {

// Runs `fill(host_pointer)` on contiguous host memory and copies the result into `self`.
template <class Fill>
void fill_through_host(Tensor& self, Fill fill) {
  if (self.device().is_cpu() && self.is_contiguous()) {
    fill(self.data_ptr());
    return;
  }
  Tensor host = empty(self.sizes(), self.dtype(), Device::cpu());
  fill(host.data_ptr());
  copy_(self, host);
}

}  // namespace

void uniform_(Tensor& self, double low, double high, uint64_t seed, uint64_t stream, uint64_t first) {
  fill_through_host(self, [&](void* out) { fill_uniform(out, self.dtype(), self.numel(), low, high, seed, stream, first); });
}

void normal_(Tensor& self, double mean, double std, uint64_t seed, uint64_t stream, uint64_t first) {
  fill_through_host(self, [&](void* out) { fill_normal(out, self.dtype(), self.numel(), mean, std, seed, stream, first); });
}

void randint_(Tensor& self, int64_t low, int64_t high, uint64_t seed, uint64_t stream, uint64_t first) {
  fill_through_host(self, [&](void* out) { fill_randint(out, self.dtype(), self.numel(), low, high, seed, stream, first); });
}

}  // namespace tessera::native
