// Adadelta's fused update; the order of operations is _single_tensor_adadelta's (torch 1.13).
#include "tessera/optim/adadelta.h"

#include <cmath>

#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"
#include "tessera/tensor/optimizer_updates.h"

namespace tessera::optim {

void AdadeltaOptions::validate(const std::string& optimizer) const {
  TS_CHECK(lr >= 0.0, ValueError, optimizer, ": invalid learning rate ", lr, " (must be >= 0)");
  TS_CHECK(rho >= 0.0 && rho <= 1.0, ValueError, optimizer, ": invalid rho ", rho, " (must be in [0, 1])");
  TS_CHECK(eps >= 0.0, ValueError, optimizer, ": invalid eps ", eps, " (must be >= 0)");
  TS_CHECK(weight_decay >= 0.0, ValueError, optimizer, ": invalid weight_decay ", weight_decay, " (must be >= 0)");
}

std::vector<Optimizer::StateSlot> Adadelta::state_slots(size_t) const {
  return {{"step", false, true}, {"square_avg", true, true}, {"acc_delta", true, true}};
}

void Adadelta::update(size_t group, Tensor& param, const Tensor& grad, StateDict& state) {
  if (state.empty()) {
    state.insert("step", full({}, 0.0, {.dtype = DType::f64}));
    state.insert("square_avg", zeros_state(param));
    state.insert("acc_delta", zeros_state(param));
  }
  // Adadelta's update does not read the step; PyTorch counts it for checkpoints.
  state.at("step").fill_(state.at("step").item<double>() + 1.0);
  const AdadeltaOptions& o = options(group);
  dispatch_floating(param.dtype(), "Adadelta.step", [&]<class T>() {
    const update_rules::AdadeltaScalars<T> s{.rho = static_cast<T>(o.rho),
                                       .one_minus_rho = static_cast<T>(1.0 - o.rho),
                                       .eps = static_cast<T>(o.eps),
                                       .weight_decay = static_cast<T>(o.weight_decay),
                                       .negative_lr = static_cast<T>(-o.lr),
                                       .decay = o.weight_decay != 0.0,
                                       .maximize = o.maximize};
    T* p = param.data_ptr<T>();
    const T* g = grad.data_ptr<T>();
    T* v = state.at("square_avg").data_ptr<T>();
    T* u = state.at("acc_delta").data_ptr<T>();
    const int64_t n = param.numel();
    native::adadelta_update<T>(param.device(), n, p, g, v, u, s);
  });
}

}  // namespace tessera::optim
