#include "tessera/nn/clip_grad.h"

#include <cmath>

#include "tessera/autograd/grad_mode.h"
#include "tessera/tensor/native.h"

namespace tessera::nn {

double clip_grad_norm(const std::vector<Tensor>& parameters, double max_norm) {
  NoGradGuard no_grad;
  double squares = 0;
  for (const Tensor& p : parameters) {
    Tensor grad = p.grad();
    if (!grad.defined()) continue;
    Tensor g64 = native::to_dtype(grad, DType::f64);
    squares += native::sum(native::binary(native::BinaryOp::mul, g64, g64), {}, false).item<double>();
  }
  double norm = std::sqrt(squares);
  double scale = std::min(max_norm / (norm + 1e-6), 1.0);
  for (const Tensor& p : parameters) {
    Tensor grad = p.grad();
    if (grad.defined()) native::binary_(native::BinaryOp::mul, grad, scale);
  }
  return norm;
}

}  // namespace tessera::nn
