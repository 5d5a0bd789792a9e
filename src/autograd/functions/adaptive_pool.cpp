// Differentiable adaptive average pooling: the backward needs only the input's shape.
#include "tessera/autograd/functions/recording.h"

namespace tessera {

Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size) {
  Tensor out = native::adaptive_avg_pool2d(input, output_size);
  if (needs_grad({input})) {
    record("AdaptiveAvgPool2dBackward", {input}, {out}, [shape = input.sizes()](const TensorList& g) {
      return TensorList{native::adaptive_avg_pool2d_backward(g[0], shape)};
    });
  }
  return out;
}

}  // namespace tessera
