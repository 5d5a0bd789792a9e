// Layers composed of differentiable ops on every device: conv1d (conv2d over a plane of
// height 1), avg_pool2d (a sum by conv2d with a ones kernel on each plane, then a divide,
// so each output is PyTorch's sum / divisor rather than a sum of pre-scaled terms) and
// group_norm (statistics over each group's channels and positions).
#include "tessera/autograd/functions/recording.h"
#include "tessera/tensor/device_check.h"
#include "tessera/tensor/factory.h"

namespace tessera {

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv1dFuncOptions& options) {
  check_defined(input, "conv1d");
  check_defined(weight, "conv1d", "weight");
  TS_CHECK(input.dim() == 2 || input.dim() == 3, ShapeError, "conv1d: expected an input [N, C, L] or [C, L], got ",
           shape_str(input.sizes()));
  TS_CHECK(weight.dim() == 3, ShapeError, "conv1d: expected a weight [out, in, k], got ", shape_str(weight.sizes()));
  const bool batched = input.dim() == 3;
  const Tensor planes = (batched ? input : input.unsqueeze(0)).unsqueeze(2);  // [N, C, 1, L]
  const Tensor out = conv2d(planes, weight.unsqueeze(2), bias,
                            {.stride = Size2(1, options.stride),
                             .padding = Size2(0, options.padding),
                             .dilation = Size2(1, options.dilation)})
                         .squeeze(2);
  return batched ? out : out.squeeze(0);
}

Tensor avg_pool2d(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride, Size2 padding,
                  const AvgPool2dOptions& options) {
  check_defined(input, "avg_pool2d");
  TS_CHECK(input.dim() == 3 || input.dim() == 4, ShapeError,
           "avg_pool2d: expected an input [N, C, H, W] or [C, H, W], got ", shape_str(input.sizes()));
  TS_CHECK(!options.ceil_mode, ValueError, "avg_pool2d: ceil_mode=true is not supported");
  TS_CHECK(padding.h * 2 <= kernel_size.h && padding.w * 2 <= kernel_size.w, ValueError,
           "avg_pool2d: padding should be at most half of the kernel size, got padding ", padding.h, "x", padding.w,
           " for kernel ", kernel_size.h, "x", kernel_size.w);
  const Size2 step = stride.value_or(kernel_size);
  const Shape shape = input.sizes();
  const int64_t h = shape[shape.size() - 2], w = shape[shape.size() - 1];
  const Tensor planes = input.reshape({-1, 1, h, w});
  const TensorOptions like{.dtype = input.dtype(), .device = input.device()};
  const Conv2dFuncOptions window{.stride = step, .padding = padding};
  Tensor sums = conv2d(planes, ones({1, 1, kernel_size.h, kernel_size.w}, like), {}, window);
  Tensor divisor;
  if (options.divisor_override) {
    TS_CHECK(*options.divisor_override != 0, ValueError, "avg_pool2d: divisor_override must be nonzero");
    divisor = full({}, static_cast<double>(*options.divisor_override), like);
  } else if (options.count_include_pad) {
    divisor = full({}, static_cast<double>(kernel_size.h * kernel_size.w), like);
  } else {
    // The input positions each window covers: the same pooling of a plane of ones.
    NoGradGuard no_grad;
    divisor = conv2d(ones({1, 1, h, w}, like), ones({1, 1, kernel_size.h, kernel_size.w}, like), {}, window);
  }
  Tensor pooled = div(sums, divisor);
  Shape out_shape(shape.begin(), shape.end() - 2);
  out_shape.push_back(pooled.size(2));
  out_shape.push_back(pooled.size(3));
  return pooled.reshape(out_shape);
}

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  check_defined(input, "group_norm");
  TS_CHECK(input.dim() >= 2, ShapeError, "group_norm: expected an input [N, C, ...], got ", shape_str(input.sizes()));
  const int64_t channels = input.size(1);
  TS_CHECK(num_groups > 0 && channels % num_groups == 0, ValueError, "group_norm: ", channels,
           " channels do not split into ", num_groups, " groups");
  // [N, G, C/G * spatial]: each row is one group of one sample.
  const Tensor groups = input.reshape({input.size(0), num_groups, -1});
  const Tensor centred = sub(groups, mean(groups, {2}, true));
  const Tensor variance = mean(mul(centred, centred), {2}, true);  // biased, as PyTorch's
  Tensor out = mul(centred, pow(add(variance, eps), -0.5)).reshape(input.sizes());
  Shape per_channel(static_cast<size_t>(input.dim()), 1);
  per_channel[1] = channels;
  if (weight.defined()) out = mul(out, weight.reshape(per_channel));
  if (bias.defined()) out = add(out, bias.reshape(per_channel));
  return out;
}

}  // namespace tessera
