// SGD's fused update; the order of operations is _single_tensor_sgd's (torch 1.13).
#include "tessera/optim/sgd.h"

#include <cmath>

#include "tessera/optim/elementwise.h"
#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"

namespace tessera::optim {

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : Optimizer(std::move(params)), options_(options) {
  validate_options();
  register_hyperparameter("lr", options_.lr);
  register_hyperparameter("momentum", options_.momentum);
  register_hyperparameter("dampening", options_.dampening);
  register_hyperparameter("weight_decay", options_.weight_decay);
  register_hyperparameter("nesterov", options_.nesterov);
  register_hyperparameter("maximize", options_.maximize);
}

void SGD::validate_options() const {
  const SGDOptions& o = options_;
  TS_CHECK(!std::isnan(o.lr), ValueError, "SGD: lr is required (as in PyTorch): SGD(params, {.lr = 0.01})");
  TS_CHECK(o.lr >= 0.0, ValueError, "SGD: invalid learning rate ", o.lr, " (must be >= 0)");
  TS_CHECK(o.momentum >= 0.0, ValueError, "SGD: invalid momentum ", o.momentum, " (must be >= 0)");
  TS_CHECK(o.weight_decay >= 0.0, ValueError, "SGD: invalid weight_decay ", o.weight_decay, " (must be >= 0)");
  TS_CHECK(std::isfinite(o.dampening), ValueError, "SGD: invalid dampening ", o.dampening);
  TS_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0), ValueError,
           "SGD: Nesterov momentum requires a momentum and zero dampening (momentum ", o.momentum,
           ", dampening ", o.dampening, ")");
}

std::vector<Optimizer::StateSlot> SGD::state_slots() const {
  return {{"momentum_buffer", /*per_element=*/true, /*required=*/false}};
}

namespace {

template <class T>
void sgd_update(T* param, const T* grad, T* buffer, bool first_step, int64_t n, const SGDOptions& o) {
  // Python floats reach PyTorch's kernels cast to the tensor's dtype.
  const T weight_decay = static_cast<T>(o.weight_decay);
  const T momentum = static_cast<T>(o.momentum);
  const T one_minus_dampening = static_cast<T>(1.0 - o.dampening);
  const T negative_lr = static_cast<T>(-o.lr);
  const bool decay = o.weight_decay != 0.0;
  const bool use_momentum = o.momentum != 0.0;
  if (use_momentum && !first_step && !decay && !o.maximize && !o.nesterov) {
    // SGD with momentum, the common case, as a loop the compiler vectorises (the general
    // loop below is not): the same operations per element, so the same bits.
#pragma omp parallel for simd schedule(static) if (n >= cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T b = detail::add_scaled(buffer[i] * momentum, grad[i], one_minus_dampening);
      buffer[i] = b;
      param[i] = detail::add_scaled(param[i], b, negative_lr);
    }
    return;
  }
  detail::for_each_element(n, [=](int64_t i) {
    T d = o.maximize ? -grad[i] : grad[i];
    if (decay) d = detail::add_scaled(d, param[i], weight_decay);
    if (use_momentum) {
      T b = first_step ? d : detail::add_scaled(buffer[i] * momentum, d, one_minus_dampening);
      buffer[i] = b;
      d = o.nesterov ? detail::add_scaled(d, b, momentum) : b;
    }
    param[i] = detail::add_scaled(param[i], d, negative_lr);
  });
}

}  // namespace

void SGD::update(Tensor& param, const Tensor& grad, StateDict& state) {
  bool first_step = false;
  if (options_.momentum != 0.0 && !state.contains("momentum_buffer")) {
    state.insert("momentum_buffer", zeros_like(param));
    first_step = true;
  }
  Tensor buffer = options_.momentum != 0.0 ? state.at("momentum_buffer") : Tensor();
  dispatch_floating(param.dtype(), "SGD.step", [&]<class T>() {
    sgd_update<T>(param.data_ptr<T>(), grad.data_ptr<T>(), buffer.defined() ? buffer.data_ptr<T>() : nullptr,
                  first_step, param.numel(), options_);
  });
}

}  // namespace tessera::optim
