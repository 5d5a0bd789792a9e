// Differentiable softmax, log_softmax, nll_loss, cross_entropy and dropout.
#include "tessera/autograd/function.h"
#include "tessera/autograd/functions.h"

namespace tessera {

using autograd::needs_grad;
using autograd::record;
using autograd::saved;
using autograd::TensorList;

Tensor softmax(const Tensor& x, int64_t dim) {
  Tensor out = native::softmax(x, dim);
  if (needs_grad({x})) {
    record("SoftmaxBackward", {x}, {out}, [y = saved(out), dim](const TensorList& g) {
      return TensorList{native::softmax_backward(g[0], y, dim)};
    });
  }
  return out;
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  Tensor out = native::log_softmax(x, dim);
  if (needs_grad({x})) {
    record("LogSoftmaxBackward", {x}, {out}, [y = saved(out), dim](const TensorList& g) {
      return TensorList{native::log_softmax_backward(g[0], y, dim)};
    });
  }
  return out;
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options) {
  auto [loss, total_weight] =
      native::nll_loss(log_probs, target, options.weight, options.reduction, options.ignore_index);
  if (needs_grad({log_probs})) {
    record("NllLossBackward", {log_probs}, {loss},
           [lp = saved(log_probs), target = saved(target), weight = saved(options.weight),
            reduction = options.reduction, ignore_index = options.ignore_index,
            total_weight = saved(total_weight)](const TensorList& g) {
             return TensorList{
                 native::nll_loss_backward(g[0], lp, target, weight, reduction, ignore_index, total_weight)};
           });
  }
  return loss;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const NllLossOptions& options) {
  return nll_loss(log_softmax(logits, 1), target, options);
}

Tensor dropout(const Tensor& x, double p, bool training, const DropoutKey& key) {
  if (!training || p == 0) return x;
  auto [out, mask] = native::dropout(x, p, key);
  if (needs_grad({x})) {
    record("DropoutBackward", {x}, {out}, [mask = saved(mask), p](const TensorList& g) {
      return TensorList{native::dropout_backward(g[0], mask, p)};
    });
  }
  return out;
}

}  // namespace tessera
