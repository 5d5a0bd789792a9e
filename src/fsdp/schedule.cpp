// The FSDP schedule: what each forward/backward hook does to the units (see fully_shard.h).
#include <algorithm>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/fsdp/state.h"

namespace tessera::fsdp::detail {

FsdpState& state_of(nn::Module& root) {
  FsdpState* state = root.find_attachment<FsdpState>();
  TS_CHECK(state != nullptr, ValueError, root.type_name(), " is not sharded: call fsdp::fully_shard on it first");
  return *state;
}

Unit* root_unit(FsdpState& state) {
  for (auto& unit : state.units()) {
    if (unit->is_root()) return unit.get();
  }
  return nullptr;
}

void FsdpState::install_hooks() {
  root_.register_forward_pre_hook([this](nn::Module&, Tensor&) { root_pre_forward(); });
  root_.register_forward_hook([this](nn::Module&, Tensor&) { root_post_forward(); });
  for (auto& owned : units_) {
    Unit* unit = owned.get();
    if (!unit->is_root()) {
      unit->module().register_forward_pre_hook([this, unit](nn::Module&, Tensor&) { pre_forward(*unit); });
      unit->module().register_forward_hook([this, unit](nn::Module&, Tensor& output) { post_forward(*unit, output); });
    }
    for (size_t i = 0; i < unit->parameters().size(); ++i) {
      Tensor& parameter = *unit->parameters()[i].slot;
      parameter.register_post_accumulate_grad_hook(
          [this, unit, i](Tensor& leaf) { on_parameter_gradient(*unit, i, leaf); });
    }
  }
}

void FsdpState::root_pre_forward() {
  in_forward_ = true;
  if (Unit* root = root_unit(*this)) root->wait_gathered();
}

void FsdpState::root_post_forward() {
  in_forward_ = false;
  if (!forward_order_.empty()) order_recorded_ = true;
}

Unit* FsdpState::neighbour(const Unit& unit, int step) const {
  auto it = std::find(forward_order_.begin(), forward_order_.end(), &unit);
  if (it == forward_order_.end()) return nullptr;
  auto index = (it - forward_order_.begin()) + step;
  if (index < 0 || index >= static_cast<std::ptrdiff_t>(forward_order_.size())) return nullptr;
  return forward_order_[static_cast<size_t>(index)];
}

void FsdpState::pre_forward(Unit& unit) {
  if (!in_forward_) root_pre_forward();  // model.forward(x) was called directly
  if (!order_recorded_ && std::find(forward_order_.begin(), forward_order_.end(), &unit) == forward_order_.end()) {
    forward_order_.push_back(&unit);
  }
  unit.wait_gathered();
  if (options_.prefetch && order_recorded_) {
    if (Unit* next = neighbour(unit, +1)) next->start_gather();
  }
}

void FsdpState::post_forward(Unit& unit, Tensor& output) {
  if (options_.strategy == ShardingStrategy::full_shard) unit.reshard();
  if (output.defined() && output.requires_grad() && GradMode::is_enabled()) {
    output.register_hook([this, &unit](const Tensor&) {
      pre_backward(unit);
      return Tensor();
    });
  }
}

void FsdpState::begin_backward_once() {
  if (in_backward_) return;
  in_backward_ = true;
  in_forward_ = false;
  if (!forward_order_.empty()) order_recorded_ = true;
  autograd::queue_callback([this] { finish_backward(); });
}

void FsdpState::pre_backward(Unit& unit) {
  begin_backward_once();
  unit.wait_gathered();
  if (options_.prefetch) {
    if (Unit* next = neighbour(unit, -1)) next->start_gather();
  }
}

void FsdpState::on_parameter_gradient(Unit& unit, size_t index, Tensor& parameter) {
  begin_backward_once();
  Tensor grad = parameter.grad();
  parameter.set_grad(Tensor());  // the gradient lives on in the unit's buffer
  unit.accumulate_gradient(index, grad);
  if (unit.gradients_received() == unit.gradients_expected()) finish_unit(unit);
}

void FsdpState::finish_unit(Unit& unit) {
  if (!no_sync) unit.reduce_gradients();
  unit.reset_gradient_count();
  if (options_.strategy != ShardingStrategy::no_shard) unit.reshard();
}

void FsdpState::finish_backward() {
  // Units some of whose parameters got no gradient: reduce what arrived, in unit order so
  // that every rank issues the same collectives.
  for (auto& unit : units_) {
    if (unit->gradients_received() > 0) finish_unit(*unit);
  }
  for (auto& unit : units_) {
    if (!unit->is_root()) unit->reshard();
  }
  in_backward_ = false;
}

}  // namespace tessera::fsdp::detail
