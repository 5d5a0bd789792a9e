#include "tessera/tensor/factory.h"

#include "tessera/tensor/error.h"
#include "tessera/tensor/native.h"

namespace tessera {

namespace {

Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor empty(const Shape& shape, const TensorOptions& o) {
  return finish(native::empty(shape, o.dtype, o.device), o);
}
Tensor zeros(const Shape& shape, const TensorOptions& o) { return full(shape, 0.0, o); }
Tensor ones(const Shape& shape, const TensorOptions& o) { return full(shape, 1.0, o); }
Tensor full(const Shape& shape, double value, const TensorOptions& o) {
  return finish(native::full(shape, value, o.dtype, o.device), o);
}
Tensor zeros_like(const Tensor& like) { return native::zeros(like.sizes(), like.dtype(), like.device()); }
Tensor ones_like(const Tensor& like) { return native::full(like.sizes(), 1.0, like.dtype(), like.device()); }
Tensor full_like(const Tensor& like, double value) {
  return native::full(like.sizes(), value, like.dtype(), like.device());
}

Tensor arange(double end, const TensorOptions& o) { return arange(0, end, 1, o); }
Tensor arange(double start, double end, double step, const TensorOptions& o) {
  return finish(native::arange(start, end, step, o.dtype, o.device), o);
}

Tensor linspace(double start, double end, int64_t steps, const TensorOptions& o) {
  return finish(native::linspace(start, end, steps, o.dtype, o.device), o);
}

Tensor randperm(int64_t n, Generator& generator, const TensorOptions& o) {
  TS_CHECK(n >= 0, ValueError, "randperm: n must be non-negative, got ", n);
  TS_CHECK(o.dtype != DType::boolean, DTypeError,
           "randperm: expected a numeric dtype, got bool");
  // The order of n uniform doubles (ties, at 2^-53 apart, fall back to index order): every
  // permutation equally likely, counter-based like every draw here.
  Tensor keys = native::empty({n}, DType::f64, Device::cpu());
  native::uniform_(keys, 0.0, 1.0, generator.seed(), generator.stream(), generator.advance(n));
  Tensor order = std::get<1>(native::topk(keys, n, 0, /*largest=*/false));
  return finish(native::to_device(native::to_dtype(order, o.dtype), o.device), o);
}

Tensor rand(const Shape& shape, Generator& generator, const TensorOptions& o) {
  Tensor t = native::empty(shape, o.dtype, o.device);
  native::uniform_(t, 0.0, 1.0, generator.seed(), generator.stream(), generator.advance(t.numel()));
  return finish(t, o);
}

Tensor randn(const Shape& shape, Generator& generator, const TensorOptions& o) {
  Tensor t = native::empty(shape, o.dtype, o.device);
  native::normal_(t, 0.0, 1.0, generator.seed(), generator.stream(), generator.advance(t.numel()));
  return finish(t, o);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& generator, const TensorOptions& o) {
  Tensor t = native::empty(shape, o.dtype, o.device);
  native::randint_(t, low, high, generator.seed(), generator.stream(), generator.advance(t.numel()));
  return finish(t, o);
}

Tensor rand(const Shape& shape, const TensorOptions& o) {
  Tensor t;
  with_default_generator([&](Generator& generator) { t = rand(shape, generator, o); });
  return t;
}

Tensor randn(const Shape& shape, const TensorOptions& o) {
  Tensor t;
  with_default_generator([&](Generator& generator) { t = randn(shape, generator, o); });
  return t;
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, const TensorOptions& o) {
  Tensor t;
  with_default_generator([&](Generator& generator) { t = randint(low, high, shape, generator, o); });
  return t;
}

Tensor randperm(int64_t n, const TensorOptions& o) {
  Tensor t;
  with_default_generator([&](Generator& generator) { t = randperm(n, generator, o); });
  return t;
}

Tensor rand_like(const Tensor& like) { return rand(like.sizes(), {.dtype = like.dtype(), .device = like.device()}); }
Tensor randn_like(const Tensor& like) { return randn(like.sizes(), {.dtype = like.dtype(), .device = like.device()}); }
Tensor randint_like(const Tensor& like, int64_t low, int64_t high) {
  return randint(low, high, like.sizes(), {.dtype = like.dtype(), .device = like.device()});
}

template <class T>
Tensor tensor(const std::vector<T>& values, Shape shape, TensorOptions options) {
  TS_CHECK(options.dtype == dtype_of<T>, DTypeError, "tensor(): values of ", dtype_name(dtype_of<T>),
           " with options.dtype ", dtype_name(options.dtype), "; convert with .to() afterwards");
  Shape resolved = native::infer_shape(shape, static_cast<int64_t>(values.size()), {static_cast<int64_t>(values.size())});
  return finish(from_data(values.data(), resolved, options.dtype, options.device), options);
}

template <>
Tensor tensor<bool>(const std::vector<bool>& values, Shape shape, TensorOptions options) {
  std::vector<uint8_t> bytes(values.begin(), values.end());  // std::vector<bool> packs bits
  TS_CHECK(options.dtype == DType::boolean, DTypeError, "tensor(): values of bool with options.dtype ",
           dtype_name(options.dtype), "; convert with .to() afterwards");
  Shape resolved = native::infer_shape(shape, static_cast<int64_t>(bytes.size()), {static_cast<int64_t>(bytes.size())});
  return finish(from_data(bytes.data(), resolved, options.dtype, options.device), options);
}

Tensor from_data(const void* data, const Shape& shape, DType dtype, Device device) {
  Tensor t = native::empty(shape, dtype, device);
  if (dtype == DType::boolean && t.numel() > 0) {
    // A bool byte must hold 0 or 1 (anything else is undefined behaviour once read as
    // bool): nonzero bytes become true, as a conversion to torch.bool does.
    std::vector<uint8_t> normalised(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + t.numel());
    for (uint8_t& byte : normalised) byte = byte != 0;
    copy_bytes(t.data_ptr(), device, normalised.data(), Device::cpu(), t.nbytes());
    return t;
  }
  copy_bytes(t.data_ptr(), device, data, Device::cpu(), t.nbytes());
  return t;
}

template Tensor tensor<float>(const std::vector<float>&, Shape, TensorOptions);
template Tensor tensor<double>(const std::vector<double>&, Shape, TensorOptions);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, Shape, TensorOptions);
template Tensor tensor<uint8_t>(const std::vector<uint8_t>&, Shape, TensorOptions);

}  // namespace tessera
