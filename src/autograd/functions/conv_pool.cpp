// Differentiable conv2d and max_pool2d.
#include "tessera/autograd/functions/recording.h"

namespace tessera {

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dFuncOptions& options) {
  Tensor out = native::conv2d(input, weight, bias, options);
  if (needs_grad({input, weight, bias})) {
    record("Conv2dBackward", {input, weight, bias}, {out},
           [x = saved(input), w = saved(weight), options, need_x = input.requires_grad(),
            need_w = weight.requires_grad(), need_b = bias.defined() && bias.requires_grad()](const TensorList& g) {
             auto [grad_x, grad_w, grad_b] = native::conv2d_backward(g[0], x, w, options, {need_x, need_w, need_b});
             return TensorList{grad_x, grad_w, grad_b};
           });
  }
  return out;
}

Tensor max_pool2d(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride, Size2 padding) {
  native::MaxPool2dWindow options{kernel_size, stride.value_or(kernel_size), padding};
  auto [out, indices] = native::max_pool2d(input, options);
  if (needs_grad({input})) {
    record("MaxPool2dBackward", {input}, {out}, [indices = saved(indices), shape = input.sizes()](const TensorList& g) {
      return TensorList{native::max_pool2d_backward(g[0], indices, shape)};
    });
  }
  return out;
}

}  // namespace tessera
