// Differentiable softmax, log_softmax, nll_loss, cross_entropy (with label smoothing) and
// dropout.
#include "tessera/autograd/functions/recording.h"

namespace tessera {

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

namespace {

// What nll_loss's gradient reads besides the log-probabilities; both nodes below keep it.
struct SavedTargets {
  Tensor target, weight, total_weight;
  Reduction reduction;
  int64_t ignore_index;

  SavedTargets(const Tensor& target_, const NllLossOptions& options, const Tensor& total_weight_)
      : target(saved(target_)),
        weight(saved(options.weight)),
        total_weight(saved(total_weight_)),
        reduction(options.reduction),
        ignore_index(options.ignore_index) {}
};

// nll_loss recorded, with the summed weight of the targets it counted (mean's divisor).
std::tuple<Tensor, Tensor> nll_loss_and_total_weight(const Tensor& log_probs, const Tensor& target,
                                                     const NllLossOptions& options) {
  auto [loss, total_weight] =
      native::nll_loss(log_probs, target, options.weight, options.reduction, options.ignore_index);
  if (needs_grad({log_probs})) {
    record("NllLossBackward", {log_probs}, {loss},
           [lp = saved(log_probs), t = SavedTargets(target, options, total_weight)](const TensorList& g) {
             return TensorList{native::nll_loss_backward(g[0], lp, t.target, t.weight, t.reduction,
                                                         t.ignore_index, t.total_weight)};
           });
  }
  return {loss, total_weight};
}

// log_softmax and nll_loss as one node that saves only the log-probabilities. Its backward
// (native::cross_entropy_backward_) turns them into the gradient, in place on its last use:
// one [N, C] buffer in backward where the two nodes held three (the saved log-probabilities,
// nll_loss's gradient and log_softmax's). The same bits as the two nodes.
Tensor fused_cross_entropy(const Tensor& logits, const Tensor& target, int64_t class_dim,
                           const NllLossOptions& options) {
  Tensor log_probs = native::log_softmax(logits, class_dim);
  auto [loss, total_weight] =
      native::nll_loss(log_probs, target, options.weight, options.reduction, options.ignore_index);
  if (needs_grad({logits})) {
    record("CrossEntropyBackward", {logits}, {loss},
           [lp = saved(log_probs), t = SavedTargets(target, options, total_weight)](const TensorList& g,
                                                                                      bool last_use) mutable {
             Tensor grad = last_use && autograd::owns_its_storage(lp) ? std::move(lp) : native::clone(lp);
             native::cross_entropy_backward_(grad, g[0], t.target, t.weight, t.reduction, t.ignore_index,
                                             t.total_weight);
             return TensorList{grad};
           });
  }
  return loss;
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options) {
  return std::get<0>(nll_loss_and_total_weight(log_probs, target, options));
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) {
  TS_CHECK(logits.defined() && logits.dim() >= 1, ShapeError,
           "cross_entropy: expected scores of shape [C], [N, C] or [N, C, d1, ...], got ",
           logits.defined() ? shape_str(logits.sizes()) : std::string("an undefined tensor"));
  TS_CHECK(!target.defined() || !is_floating(target.dtype()), DTypeError, "cross_entropy: target of dtype ",
           dtype_name(target.dtype()), ": class-probability targets are not implemented; give int64 class indices");
  TS_CHECK(options.label_smoothing >= 0 && options.label_smoothing <= 1, ValueError,
           "cross_entropy: label_smoothing must be in [0, 1], got ", options.label_smoothing);
  const int64_t class_dim = logits.dim() == 1 ? 0 : 1;
  const NllLossOptions nll_options{options.weight, options.reduction, options.ignore_index};
  if (options.label_smoothing == 0) return fused_cross_entropy(logits, target, class_dim, nll_options);
  Tensor log_probs = log_softmax(logits, class_dim);
  auto [nll, total_weight] = nll_loss_and_total_weight(log_probs, target, nll_options);
  // torch 1.13's cross_entropy_loss_label_smoothing, step by step: the smoothing term is
  // -sum_c w_c log p_c per position, zero at ignored targets, reduced like the loss (mean:
  // over the same summed target weight), then mixed in with label_smoothing / C.
  Tensor weighted = log_probs;
  if (options.weight.defined()) {
    Shape weight_shape(static_cast<size_t>(log_probs.dim()), 1);
    weight_shape[class_dim] = options.weight.size(0);
    weighted = log_probs * options.weight.view(weight_shape);
  }
  Tensor smooth = neg(sum(weighted, {class_dim}));
  smooth = masked_fill(smooth, target == static_cast<double>(options.ignore_index), 0.0);
  if (options.reduction == Reduction::mean) smooth = sum(smooth) / total_weight;
  if (options.reduction == Reduction::sum) smooth = sum(smooth);
  const double classes = static_cast<double>(logits.size(class_dim));
  return nll * (1.0 - options.label_smoothing) + smooth * (options.label_smoothing / classes);
}

Tensor dropout(const Tensor& x, double p, bool training) {
  if (!training || p == 0) return x;  // draws nothing, as F.dropout
  return dropout(x, p, training, next_dropout_key());
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

Tensor Tensor::softmax(int64_t dim) const { return tessera::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return tessera::log_softmax(*this, dim); }

}  // namespace tessera
