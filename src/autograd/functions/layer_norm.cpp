// Differentiable layer normalisation (F.layer_norm). The fused forward saves the rows'
// mean and rstd; the backward needs them with the input and the weight, nothing else.
#include "tessera/autograd/functions/recording.h"

namespace tessera {

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  auto [out, mean, rstd] = native::layer_norm(input, normalized_shape, weight, bias, eps);
  if (needs_grad({input, weight, bias})) {
    record_normalization("LayerNormBackward", input, weight, bias, out,
                         [x = saved(input), w = saved(weight), mean = mean, rstd = rstd, normalized_shape](
                             const Tensor& grad, std::array<bool, 3> mask) {
                           return native::layer_norm_backward(grad, x, normalized_shape, mean, rstd, w, mask);
                         });
  }
  return out;
}

}  // namespace tessera
