// Differentiable batch normalisation. The forward's saved statistics (batch mean and
// 1 / sqrt(var + eps) in training, the running ones in eval) are what the backward needs,
// with the input and the weight; the running statistics are buffers, never differentiated.
#include "tessera/autograd/functions/recording.h"

namespace tessera {

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  TS_CHECK(!running_mean.defined() || !running_mean.requires_grad(), ValueError,
           "batch_norm: running_mean must not require grad (it is a buffer, updated in place)");
  TS_CHECK(!running_var.defined() || !running_var.requires_grad(), ValueError,
           "batch_norm: running_var must not require grad (it is a buffer, updated in place)");
  auto [out, save_mean, save_invstd] =
      native::batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps);
  if (needs_grad({input, weight, bias})) {
    record_normalization("BatchNormBackward", input, weight, bias, out,
                         [x = saved(input), w = saved(weight), mean = save_mean, invstd = save_invstd, training](
                             const Tensor& grad, std::array<bool, 3> mask) {
                           return native::batch_norm_backward(grad, x, w, mean, invstd, training, mask);
                         });
  }
  return out;
}

}  // namespace tessera
