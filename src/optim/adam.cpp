// Adam's and AdamW's fused update; the order of operations is _single_tensor_adam's and
// _single_tensor_adamw's (torch 1.13, non-capturable path): the bias corrections and the
// step size are Python doubles, cast to the tensor's dtype where they meet a tensor.
#include "tessera/optim/adam.h"

#include <cmath>

#include "tessera/optim/elementwise.h"
#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"

namespace tessera::optim {

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options) : Adam(std::move(params), options, false) {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled_weight_decay)
    : Optimizer(std::move(params)), options_(options), decoupled_weight_decay_(decoupled_weight_decay) {
  validate_options();
  register_hyperparameter("lr", options_.lr);
  register_hyperparameter("betas", options_.betas);
  register_hyperparameter("eps", options_.eps);
  register_hyperparameter("weight_decay", options_.weight_decay);
  register_hyperparameter("amsgrad", options_.amsgrad);
  register_hyperparameter("maximize", options_.maximize);
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : Adam(std::move(params),
           AdamOptions{.lr = options.lr,
                       .betas = options.betas,
                       .eps = options.eps,
                       .weight_decay = options.weight_decay,
                       .amsgrad = options.amsgrad,
                       .maximize = options.maximize},
           true) {}

void Adam::validate_options() const {
  const AdamOptions& o = options_;
  const std::string name = type_name();
  TS_CHECK(o.lr >= 0.0, ValueError, name, ": invalid learning rate ", o.lr, " (must be >= 0)");
  TS_CHECK(o.eps >= 0.0, ValueError, name, ": invalid eps ", o.eps, " (must be >= 0)");
  TS_CHECK(o.betas[0] >= 0.0 && o.betas[0] < 1.0, ValueError, name, ": invalid beta1 ", o.betas[0],
           " (must be in [0, 1))");
  TS_CHECK(o.betas[1] >= 0.0 && o.betas[1] < 1.0, ValueError, name, ": invalid beta2 ", o.betas[1],
           " (must be in [0, 1))");
  TS_CHECK(o.weight_decay >= 0.0, ValueError, name, ": invalid weight_decay ", o.weight_decay, " (must be >= 0)");
}

std::vector<Optimizer::StateSlot> Adam::state_slots() const {
  return {{"step", false, true},
          {"exp_avg", true, true},
          {"exp_avg_sq", true, true},
          {"max_exp_avg_sq", true, options_.amsgrad}};
}

namespace {

struct AdamScalars {
  double beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
  double weight_decay;        // coupled: added to the gradient (Adam)
  double decay_factor;        // decoupled: 1 - lr * weight_decay (AdamW), else 1
  double bias_correction2_sqrt;
  double negative_step_size;  // -lr / (1 - beta1^t)
  bool decay, decoupled, amsgrad, maximize;
};

template <class T>
void adam_update(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq, int64_t n,
                 const AdamScalars& s) {
  const T beta1 = static_cast<T>(s.beta1), beta2 = static_cast<T>(s.beta2);
  const T one_minus_beta1 = static_cast<T>(s.one_minus_beta1), one_minus_beta2 = static_cast<T>(s.one_minus_beta2);
  const T eps = static_cast<T>(s.eps), weight_decay = static_cast<T>(s.weight_decay);
  const T decay_factor = static_cast<T>(s.decay_factor);
  const T bias_correction2_sqrt = static_cast<T>(s.bias_correction2_sqrt);
  const T negative_step_size = static_cast<T>(s.negative_step_size);
  const bool coupled_decay = s.decay && !s.decoupled, decoupled_decay = s.decoupled;
  const bool amsgrad = s.amsgrad, maximize = s.maximize;
  detail::for_each_element(n, [=](int64_t i) {
    T g = maximize ? -grad[i] : grad[i];
    T p = param[i];
    if (coupled_decay) g = detail::add_scaled(g, p, weight_decay);
    if (decoupled_decay) p = p * decay_factor;
    const T m = detail::add_scaled(exp_avg[i] * beta1, g, one_minus_beta1);
    const T v = detail::addcmul(exp_avg_sq[i] * beta2, g, g, one_minus_beta2);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    T second_moment = v;
    if (amsgrad) {
      second_moment = detail::maximum(max_exp_avg_sq[i], v);
      max_exp_avg_sq[i] = second_moment;
    }
    const T denom = std::sqrt(second_moment) / bias_correction2_sqrt + eps;
    param[i] = detail::addcdiv(p, m, denom, negative_step_size);
  });
}

}  // namespace

void Adam::update(Tensor& param, const Tensor& grad, StateDict& state) {
  if (state.empty()) {
    state.insert("step", full({}, 0.0, {.dtype = DType::f64}));
    state.insert("exp_avg", zeros_like(param));
    state.insert("exp_avg_sq", zeros_like(param));
  }
  if (options_.amsgrad && !state.contains("max_exp_avg_sq")) state.insert("max_exp_avg_sq", zeros_like(param));
  // PyTorch keeps the step in a float tensor and reads it back as a Python float.
  const double step = state.at("step").item<double>() + 1.0;
  state.at("step").fill_(step);

  const AdamOptions& o = options_;
  AdamScalars s{};
  s.beta1 = o.betas[0];
  s.beta2 = o.betas[1];
  s.one_minus_beta1 = 1.0 - o.betas[0];
  s.one_minus_beta2 = 1.0 - o.betas[1];
  s.eps = o.eps;
  s.weight_decay = o.weight_decay;
  s.decay = o.weight_decay != 0.0;
  s.decoupled = decoupled_weight_decay_;
  s.decay_factor = 1.0 - o.lr * o.weight_decay;
  const double bias_correction1 = 1.0 - std::pow(o.betas[0], step);
  const double bias_correction2 = 1.0 - std::pow(o.betas[1], step);
  s.negative_step_size = -(o.lr / bias_correction1);
  s.bias_correction2_sqrt = std::sqrt(bias_correction2);
  s.amsgrad = o.amsgrad;
  s.maximize = o.maximize;

  Tensor max_exp_avg_sq = o.amsgrad ? state.at("max_exp_avg_sq") : Tensor();
  dispatch_floating(param.dtype(), type_name() + ".step", [&]<class T>() {
    adam_update<T>(param.data_ptr<T>(), grad.data_ptr<T>(), state.at("exp_avg").data_ptr<T>(),
                   state.at("exp_avg_sq").data_ptr<T>(),
                   max_exp_avg_sq.defined() ? max_exp_avg_sq.data_ptr<T>() : nullptr, param.numel(), s);
  });
}

}  // namespace tessera::optim
