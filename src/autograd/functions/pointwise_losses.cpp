// Losses that compare element by element: mse_loss, l1_loss, binary_cross_entropy and
// binary_cross_entropy_with_logits, composed of differentiable ops in torch 1.13's order
// of operations, so that values and gradients follow PyTorch's to rounding.
#include "tessera/autograd/functions/recording.h"
#include "tessera/tensor/device_check.h"

namespace tessera {

namespace {

Tensor reduce(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::none: return loss;
    case Reduction::sum: return sum(loss);
    case Reduction::mean: return mean(loss);
  }
  return loss;
}

void check_pair(const Tensor& input, const Tensor& target, const char* op) {
  check_defined(input, op);
  check_defined(target, op, "target");
  TS_CHECK(is_floating(input.dtype()) && input.dtype() == target.dtype(), DTypeError, op,
           ": input and target must share one floating dtype, got ", dtype_name(input.dtype()), " and ",
           dtype_name(target.dtype()));
  // PyTorch broadcasts with a warning; a mismatch is almost always a bug (a [N] target
  // against [N, 1] scores averages N^2 pairs), so here it is an error.
  TS_CHECK(input.sizes() == target.sizes(), ShapeError, op, ": target shape ", shape_str(target.sizes()),
           " differs from input shape ", shape_str(input.sizes()));
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_pair(input, target, "mse_loss");
  const Tensor difference = sub(input, target);
  return reduce(mul(difference, difference), reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_pair(input, target, "l1_loss");
  return reduce(abs(sub(input, target)), reduction);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction) {
  check_pair(input, target, "binary_cross_entropy");
  {
    const Tensor inside = native::binary(BinaryOp::logical_and, native::binary(BinaryOp::ge, input, 0.0),
                                         native::binary(BinaryOp::le, input, 1.0));
    const int64_t outside = input.numel() - native::sum(inside, {}, false).item<int64_t>();
    TS_CHECK(outside == 0, ValueError,
             "binary_cross_entropy: every element of input must be in [0, 1] (probabilities; scores go to "
             "binary_cross_entropy_with_logits), got ", outside, " of ", input.numel(), " outside");
  }
  // As PyTorch: each log clamped at -100, so that a probability of exactly 0 or 1 gives a
  // finite loss.
  const Tensor log_p = clamp_min(log(input), -100.0);
  const Tensor log_not_p = clamp_min(log(1.0 - input), -100.0);
  Tensor loss = neg(add(mul(target, log_p), mul(1.0 - target, log_not_p)));
  if (weight.defined()) loss = mul(loss, weight);
  return reduce(loss, reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BinaryCrossEntropyWithLogitsOptions& options) {
  check_pair(input, target, "binary_cross_entropy_with_logits");
  // torch 1.13: with m = max(-x, 0), loss = (1 - t) x + l (log(e^-m + e^(-x-m)) + m), where
  // l = 1 + (pos_weight - 1) t (l = 1 without pos_weight): log(1 + e^-x) without overflow.
  const Tensor shift = clamp_min(neg(input), 0.0);
  const Tensor log_term = log(add(exp(neg(shift)), exp(sub(neg(input), shift))));
  Tensor loss;
  if (options.pos_weight.defined()) {
    const Tensor log_weight = add(mul(options.pos_weight - 1.0, target), 1.0);
    loss = add(mul(1.0 - target, input), mul(log_weight, add(log_term, shift)));
  } else {
    loss = add(add(mul(1.0 - target, input), shift), log_term);
  }
  if (options.weight.defined()) loss = mul(loss, options.weight);
  return reduce(loss, options.reduction);
}

}  // namespace tessera
