// Adam's and AdamW's fused update; the order of operations is _single_tensor_adam's and
// _single_tensor_adamw's (torch 1.13, non-capturable path): the bias corrections and the
// step size are Python doubles, cast to the tensor's dtype where they meet a tensor.
#include "tessera/optim/adam.h"

#include <cmath>

#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"
#include "tessera/tensor/optimizer_updates.h"

namespace tessera::optim {

namespace {

AdamOptions adam_options(const AdamWOptions& o) {
  return {.lr = o.lr,
          .betas = o.betas,
          .eps = o.eps,
          .weight_decay = o.weight_decay,
          .amsgrad = o.amsgrad,
          .maximize = o.maximize};
}

}  // namespace

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : Adam("AdamW", {ParamGroup{std::move(params)}}, adam_options(options)) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& defaults)
    : Adam("AdamW", std::move(groups), adam_options(defaults)) {}

void AdamOptions::validate(const std::string& optimizer) const {
  TS_CHECK(lr >= 0.0, ValueError, optimizer, ": invalid learning rate ", lr, " (must be >= 0)");
  TS_CHECK(eps >= 0.0, ValueError, optimizer, ": invalid eps ", eps, " (must be >= 0)");
  TS_CHECK(betas[0] >= 0.0 && betas[0] < 1.0, ValueError, optimizer, ": invalid beta1 ", betas[0],
           " (must be in [0, 1))");
  TS_CHECK(betas[1] >= 0.0 && betas[1] < 1.0, ValueError, optimizer, ": invalid beta2 ", betas[1],
           " (must be in [0, 1))");
  TS_CHECK(weight_decay >= 0.0, ValueError, optimizer, ": invalid weight_decay ", weight_decay, " (must be >= 0)");
}

std::vector<Optimizer::StateSlot> Adam::state_slots(size_t group) const {
  return {{"step", false, true},
          {"exp_avg", true, true},
          {"exp_avg_sq", true, true},
          {"max_exp_avg_sq", true, options(group).amsgrad}};
}

void Adam::update(size_t group, Tensor& param, const Tensor& grad, StateDict& state) {
  const AdamOptions& o = options(group);
  if (state.empty()) {
    state.insert("step", full({}, 0.0, {.dtype = DType::f64}));
    state.insert("exp_avg", zeros_state(param));
    state.insert("exp_avg_sq", zeros_state(param));
  }
  if (o.amsgrad && !state.contains("max_exp_avg_sq")) state.insert("max_exp_avg_sq", zeros_state(param));
  // PyTorch keeps the step in a float tensor and reads it back as a Python float.
  const double step = state.at("step").item<double>() + 1.0;
  state.at("step").fill_(step);

  const double bias_correction1 = 1.0 - std::pow(o.betas[0], step);
  const double bias_correction2 = 1.0 - std::pow(o.betas[1], step);
  Tensor max_exp_avg_sq = o.amsgrad ? state.at("max_exp_avg_sq") : Tensor();
  const bool decoupled = decouples_weight_decay();
  dispatch_floating(param.dtype(), type_name() + ".step", [&]<class T>() {
    // The bias corrections and the step size are Python doubles, cast where they meet a tensor.
    const update_rules::AdamScalars<T> s{.beta1 = static_cast<T>(o.betas[0]),
                                   .beta2 = static_cast<T>(o.betas[1]),
                                   .one_minus_beta1 = static_cast<T>(1.0 - o.betas[0]),
                                   .one_minus_beta2 = static_cast<T>(1.0 - o.betas[1]),
                                   .eps = static_cast<T>(o.eps),
                                   .weight_decay = static_cast<T>(o.weight_decay),
                                   .decay_factor = static_cast<T>(1.0 - o.lr * o.weight_decay),
                                   .bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2)),
                                   .negative_step_size = static_cast<T>(-(o.lr / bias_correction1)),
                                   .coupled_decay = o.weight_decay != 0.0 && !decoupled,
                                   .decoupled_decay = decoupled,
                                   .amsgrad = o.amsgrad,
                                   .maximize = o.maximize};
    T* p = param.data_ptr<T>();
    const T* g = grad.data_ptr<T>();
    T* m = state.at("exp_avg").data_ptr<T>();
    T* v = state.at("exp_avg_sq").data_ptr<T>();
    T* v_max = max_exp_avg_sq.defined() ? max_exp_avg_sq.data_ptr<T>() : nullptr;
    const int64_t n = param.numel();
    native::adam_update<T>(param.device(), n, p, g, m, v, v_max, s);
  });
}

}  // namespace tessera::optim
