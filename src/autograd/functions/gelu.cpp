// Differentiable GELU and erf. Both backward closures keep only the input (the derivative
// is a function of x alone), never the output: one activation per layer, not two.
#include <cmath>

#include "tessera/autograd/functions/recording.h"

namespace tessera {

GeluApproximate gelu_approximate_from(std::string_view approximate) {
  if (approximate == "none") return GeluApproximate::none;
  if (approximate == "tanh") return GeluApproximate::tanh;
  throw ValueError(detail::concat("gelu: approximate must be \"none\" or \"tanh\", got \"", approximate, "\""));
}

std::string_view gelu_approximate_name(GeluApproximate approximate) {
  return approximate == GeluApproximate::tanh ? "tanh" : "none";
}

Tensor gelu(const Tensor& x, GeluApproximate approximate) {
  Tensor out = native::gelu(x, approximate);
  if (needs_grad({x})) {
    record_unary("GeluBackward", x, out, [x = saved(x), approximate](const Tensor& grad) {
      return native::gelu_backward(grad, x, approximate);
    });
  }
  return out;
}

Tensor gelu(const Tensor& x, std::string_view approximate) {
  return tessera::gelu(x, gelu_approximate_from(approximate));
}

Tensor erf(const Tensor& x) {
  Tensor out = native::erf(x);
  if (needs_grad({x})) {
    record_unary("ErfBackward", x, out, [x = saved(x)](const Tensor& grad) {
      // d erf(x) / dx = 2 / sqrt(pi) * exp(-x^2)
      Tensor local = native::unary(UnaryOp::exp, native::unary(UnaryOp::neg, native::binary(BinaryOp::mul, x, x)));
      return native::binary(BinaryOp::mul, native::binary(BinaryOp::mul, grad, local), M_2_SQRTPI);
    });
  }
  return out;
}

Tensor Tensor::erf() const { return tessera::erf(*this); }

}  // namespace tessera
