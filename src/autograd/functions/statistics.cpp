// Statistics composed of differentiable reductions: var/std (two passes: the mean, then
// the squared deviations), logsumexp (shifted by the detached maximum), and the minimum
// family written through the maximum of -x (the same ties, NaN and gradient rules).
#include <limits>

#include "tessera/autograd/functions/recording.h"
#include "tessera/tensor/device_check.h"

namespace tessera {

namespace {

// The number of elements reduced over `dims` (all when empty).
int64_t reduced_count(const Tensor& x, const Shape& dims, const char* op) {
  if (dims.empty()) return x.numel();
  int64_t count = 1;
  for (int64_t d : dims) count *= x.dim() == 0 ? 1 : x.size(wrap_dim(d, x.dim(), op));
  return count;
}

}  // namespace

Tensor var(const Tensor& x, const Shape& dims, double correction, bool keepdim) {
  check_defined(x, "var");
  TS_CHECK(is_floating(x.dtype()), DTypeError, "var: expected a floating tensor, got ", dtype_name(x.dtype()));
  const Tensor deviation = sub(x, mean(x, dims, /*keepdim=*/true));
  // PyTorch divides by max(0, N - correction): N <= correction gives inf (or NaN for 0/0).
  const double divisor = std::max(0.0, static_cast<double>(reduced_count(x, dims, "var")) - correction);
  return div(sum(mul(deviation, deviation), dims, keepdim), native::full({}, divisor, x.dtype(), x.device()));
}

Tensor std(const Tensor& x, const Shape& dims, double correction, bool keepdim) {
  return sqrt(var(x, dims, correction, keepdim));
}

Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim) {
  check_defined(x, "logsumexp");
  TS_CHECK(is_floating(x.dtype()), DTypeError, "logsumexp: expected a floating tensor, got ",
           dtype_name(x.dtype()));
  // The shift only keeps exp in range (it cancels in value and gradient); an infinite
  // maximum is replaced by 0 so that inf - inf does not turn a row of -inf into NaN.
  Tensor shift = native::amax(x, dims, /*keepdim=*/true);
  const Tensor infinite = native::binary(BinaryOp::eq, native::unary(UnaryOp::abs, shift),
                                         std::numeric_limits<double>::infinity());
  shift = native::where(infinite, native::full({}, 0.0, x.dtype(), x.device()), shift);
  Tensor out = add(log(sum(exp(sub(x, shift)), dims, /*keepdim=*/true)), shift);
  // Summing the kept size-1 dims drops them without changing a value.
  return keepdim ? out : sum(out, dims, false);
}

Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) { return neg(amax(neg(x), dims, keepdim)); }

std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  auto [values, indices] = max(neg(x), dim, keepdim);
  return {neg(values), indices};
}

Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) { return argmax(neg(x), dim, keepdim); }

Tensor Tensor::var(const Shape& dims, double correction, bool keepdim) const {
  return tessera::var(*this, dims, correction, keepdim);
}
Tensor Tensor::std(const Shape& dims, double correction, bool keepdim) const {
  return tessera::std(*this, dims, correction, keepdim);
}
Tensor Tensor::logsumexp(const Shape& dims, bool keepdim) const { return tessera::logsumexp(*this, dims, keepdim); }
Tensor Tensor::min() const { return tessera::amin(*this); }
std::tuple<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const { return tessera::min(*this, dim, keepdim); }
Tensor Tensor::amin(const Shape& dims, bool keepdim) const { return tessera::amin(*this, dims, keepdim); }
Tensor Tensor::argmin(int64_t dim, bool keepdim) const { return tessera::argmin(*this, dim, keepdim); }

}  // namespace tessera
