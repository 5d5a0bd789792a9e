// Allocation and filling of new tensors.
#include <cmath>
#include <type_traits>

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

Tensor linspace(double start, double end, int64_t steps, DType dtype, Device device) {
  TS_CHECK(steps >= 0, ValueError, "linspace: number of steps must be non-negative, got ", steps);
  Tensor host = empty({steps}, dtype, Device::cpu());
  dispatch_numeric(dtype, "linspace", [&]<class T>() {
    // ATen's CPU kernel, value for value: the step in the output's type (double for
    // integers); positions before steps / 2 count up from start, the rest down from end.
    // ATen evaluates it in 32-byte vectors, two at a time, the tail one by one: a vector at
    // `first` holds base + j * step with base the formula's value at `first` (converted to
    // T first), so the rounding of each element depends on its place in its vector.
    using Step = std::conditional_t<std::is_integral_v<T>, double, T>;
    const T first_value = static_cast<T>(start), last_value = static_cast<T>(end);
    const Step step = steps > 1 ? (static_cast<Step>(last_value) - static_cast<Step>(first_value)) /
                                      static_cast<Step>(steps - 1)
                                : Step(0);
    const int64_t halfway = steps / 2;
    auto at = [&](int64_t i) -> Step {
      return i < halfway ? static_cast<Step>(first_value) + step * static_cast<Step>(i)
                         : static_cast<Step>(last_value) - step * static_cast<Step>(steps - i - 1);
    };
    constexpr int64_t lanes = 32 / static_cast<int64_t>(sizeof(T));
    T* data = host.data_ptr<T>();
    int64_t i = 0;
    for (; i + 2 * lanes <= steps; i += 2 * lanes) {
      for (const int64_t first : {i, i + lanes}) {
        const T base = static_cast<T>(at(first));
        for (int64_t j = 0; j < lanes; ++j) data[first + j] = static_cast<T>(base + static_cast<Step>(j) * step);
      }
    }
    for (; i < steps; ++i) data[i] = static_cast<T>(at(i));
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
