// SGD's fused update; the order of operations is _single_tensor_sgd's (torch 1.13).
#include "tessera/optim/sgd.h"

#include <cmath>

#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"
#include "tessera/tensor/optimizer_updates.h"

namespace tessera::optim {

void SGDOptions::validate(const std::string& optimizer) const {
  TS_CHECK(!std::isnan(lr), ValueError, optimizer, ": lr is required (as in PyTorch): ", optimizer,
           "(params, {.lr = 0.01}), or in every group's options");
  TS_CHECK(lr >= 0.0, ValueError, optimizer, ": invalid learning rate ", lr, " (must be >= 0)");
  TS_CHECK(momentum >= 0.0, ValueError, optimizer, ": invalid momentum ", momentum, " (must be >= 0)");
  TS_CHECK(weight_decay >= 0.0, ValueError, optimizer, ": invalid weight_decay ", weight_decay, " (must be >= 0)");
  TS_CHECK(std::isfinite(dampening), ValueError, optimizer, ": invalid dampening ", dampening);
  TS_CHECK(!nesterov || (momentum > 0.0 && dampening == 0.0), ValueError, optimizer,
           ": Nesterov momentum requires a momentum and zero dampening (momentum ", momentum, ", dampening ",
           dampening, ")");
}

std::vector<Optimizer::StateSlot> SGD::state_slots(size_t) const {
  return {{"momentum_buffer", /*per_element=*/true, /*required=*/false}};
}

namespace {

template <class T>
update_rules::SgdScalars<T> sgd_scalars(const SGDOptions& o, bool first_step) {
  // Python floats reach PyTorch's kernels cast to the tensor's dtype.
  return {.weight_decay = static_cast<T>(o.weight_decay),
          .momentum = static_cast<T>(o.momentum),
          .one_minus_dampening = static_cast<T>(1.0 - o.dampening),
          .negative_lr = static_cast<T>(-o.lr),
          .decay = o.weight_decay != 0.0,
          .use_momentum = o.momentum != 0.0,
          .nesterov = o.nesterov,
          .maximize = o.maximize,
          .first_step = first_step};
}

// bfloat16 parameters: _single_tensor_sgd's tensor ops one by one, each widening to float32
// and rounding its result to bfloat16 (the element-wise kernels' rule, with the scalars
// rounded to bfloat16 as PyTorch 1.13 rounds them), so the update is PyTorch's bit for bit:
// a fused loop would round once where PyTorch rounds after every op.
void sgd_update_bf16(const SGDOptions& o, bool first_step, Tensor& param, const Tensor& grad, Tensor& buffer) {
  Tensor step = o.maximize ? -grad : grad;
  if (o.weight_decay != 0.0) step = step.clone().add_(param, o.weight_decay);
  if (o.momentum != 0.0) {
    if (first_step) {
      buffer.copy_(step);
    } else {
      buffer.mul_(o.momentum).add_(step, 1.0 - o.dampening);
    }
    step = o.nesterov ? step.clone().add_(buffer, o.momentum) : buffer;
  }
  param.add_(step, -o.lr);
}

}  // namespace

void SGD::update(size_t group, Tensor& param, const Tensor& grad, StateDict& state) {
  const SGDOptions& o = options(group);
  bool first_step = false;
  if (o.momentum != 0.0 && !state.contains("momentum_buffer")) {
    state.insert("momentum_buffer", zeros_state(param));
    first_step = true;
  }
  Tensor buffer = o.momentum != 0.0 ? state.at("momentum_buffer") : Tensor();
  if (param.dtype() == DType::bf16) return sgd_update_bf16(o, first_step, param, grad, buffer);
  dispatch_floating(param.dtype(), "SGD.step", [&]<class T>() {
    const update_rules::SgdScalars<T> s = sgd_scalars<T>(o, first_step);
    T* p = param.data_ptr<T>();
    const T* g = grad.data_ptr<T>();
    T* b = buffer.defined() ? buffer.data_ptr<T>() : nullptr;
    const int64_t n = param.numel();
    native::sgd_update<T>(param.device(), n, p, g, b, s);
  });
}

}  // namespace tessera::optim
