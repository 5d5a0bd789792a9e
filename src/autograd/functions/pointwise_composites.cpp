// Element-wise ops composed of others: clamp (one node, PyTorch's inclusive gradient
// mask), silu and the float-class tests isnan/isinf/isfinite (bool, never recorded).
#include <limits>

#include "tessera/autograd/functions/recording.h"
#include "tessera/tensor/device_check.h"
#include "tessera/tensor/factory.h"

namespace tessera {

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  check_defined(x, "clamp");
  TS_CHECK(min.has_value() || max.has_value(), ValueError, "clamp: at least one of min and max must be given");
  // max(x, min) then min(., max): with min > max every element becomes max, as in PyTorch;
  // NaN stays NaN.
  Tensor out = x;
  if (min) out = native::binary(BinaryOp::maximum, out, *min);
  if (max) out = native::binary(BinaryOp::minimum, out, *max);
  if (needs_grad({x})) {
    record_unary("ClampBackward", x, out, [x = saved(x), min, max](const Tensor& grad) {
      // The gradient passes where min <= x <= max (both ends included; NaN passes none).
      Tensor inside;
      if (min) inside = native::binary(BinaryOp::ge, x, *min);
      if (max) {
        Tensor below = native::binary(BinaryOp::le, x, *max);
        inside = inside.defined() ? native::binary(BinaryOp::logical_and, inside, below) : below;
      }
      return native::where(inside, grad, native::full({}, 0.0, grad.dtype(), grad.device()));
    });
  }
  return out;
}

Tensor clamp_min(const Tensor& x, double min) { return clamp(x, min, std::nullopt); }
Tensor clamp_max(const Tensor& x, double max) { return clamp(x, std::nullopt, max); }

Tensor silu(const Tensor& x) { return mul(x, sigmoid(x)); }

namespace {

// A bool tensor of x's shape filled with `value`: the float-class tests of integer tensors.
Tensor constant_mask(const Tensor& x, bool value) {
  return native::full(x.sizes(), value ? 1.0 : 0.0, DType::boolean, x.device());
}

}  // namespace

Tensor isnan(const Tensor& x) {
  check_defined(x, "isnan");
  if (!is_floating(x.dtype())) return constant_mask(x, false);
  return native::binary(BinaryOp::ne, x, x);
}

Tensor isinf(const Tensor& x) {
  check_defined(x, "isinf");
  if (!is_floating(x.dtype())) return constant_mask(x, false);
  return native::binary(BinaryOp::eq, native::unary(UnaryOp::abs, x), std::numeric_limits<double>::infinity());
}

Tensor isfinite(const Tensor& x) {
  check_defined(x, "isfinite");
  if (!is_floating(x.dtype())) return constant_mask(x, true);
  return native::binary(BinaryOp::lt, native::unary(UnaryOp::abs, x), std::numeric_limits<double>::infinity());
}

Tensor Tensor::clamp(std::optional<double> min, std::optional<double> max) const {
  return tessera::clamp(*this, min, max);
}
Tensor Tensor::clamp_min(double min) const { return tessera::clamp_min(*this, min); }
Tensor Tensor::clamp_max(double max) const { return tessera::clamp_max(*this, max); }
Tensor Tensor::isnan() const { return tessera::isnan(*this); }
Tensor Tensor::isinf() const { return tessera::isinf(*this); }
Tensor Tensor::isfinite() const { return tessera::isfinite(*this); }

}  // namespace tessera
