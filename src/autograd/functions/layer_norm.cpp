// Differentiable layer normalisation (F.layer_norm). The fused forward saves the rows'
// mean and rstd; the backward needs them with the input and the weight, nothing else.
#include "tessera/autograd/functions/recording.h"

namespace tessera {

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  auto [out, mean, rstd] = native::layer_norm(input, normalized_shape, weight, bias, eps);
  if (needs_grad({input, weight, bias})) {
    record("LayerNormBackward", {input, weight, bias}, {out},
           [x = saved(input), w = saved(weight), mean = mean, rstd = rstd, normalized_shape,
            mask = grad_mask(input, weight, bias)](const TensorList& g) {
             auto [grad_input, grad_weight, grad_bias] =
                 native::layer_norm_backward(g[0], x, normalized_shape, mean, rstd, w, mask);
             return TensorList{grad_input, grad_weight, grad_bias};
           });
  }
  return out;
}

}  // namespace tessera
