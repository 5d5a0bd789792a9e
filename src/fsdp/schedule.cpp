// The FSDP schedule: what each forward/backward hook does to the units (see fully_shard.h).
#include <algorithm>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/fsdp/state.h"
#include "tessera/nn/activation_checkpoint.h"
#include "tessera/tensor/native.h"

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
  // The root's own parameters (its unit, if any) take mixed precision's casts like any unit's.
  const bool root_has_unit = root_unit(*this) != nullptr;
  // The args/outputs forms of the hooks: a call of several tensors (MultiheadAttention's)
  // has each of them cast, and a backward hook on each output that carries a gradient.
  root_.register_forward_args_pre_hook([this, root_has_unit](nn::Module&, std::span<Tensor> inputs) {
    if (nn::is_recomputing()) return recompute_pre_forward(root_unit(*this), inputs);
    root_pre_forward(inputs.front());
    if (root_has_unit) cast_forward_inputs(inputs);
  });
  root_.register_forward_outputs_hook([this, root_has_unit](nn::Module&, std::span<Tensor> outputs) {
    if (root_has_unit) cast_forward_outputs(outputs);
    if (nn::is_recomputing()) return;
    root_post_forward();
  });
  for (auto& owned : units_) {
    Unit* unit = owned.get();
    if (!unit->is_root()) {
      unit->module().register_forward_args_pre_hook(
          [this, unit](nn::Module&, std::span<Tensor> inputs) { pre_forward(*unit, inputs); });
      unit->module().register_forward_outputs_hook(
          [this, unit](nn::Module&, std::span<Tensor> outputs) { post_forward(*unit, outputs); });
    }
    for (size_t i = 0; i < unit->parameters().size(); ++i) {
      Tensor& parameter = *unit->parameters()[i].slot;
      parameter.register_post_accumulate_grad_hook(
          [this, unit, i](Tensor& leaf) { on_parameter_gradient(*unit, i, leaf); });
      autograd::set_gradient_sink(parameter, [this, unit, i](const Tensor& grad) {
        begin_backward_once();
        return unit->add_gradient_contribution(i, grad);
      });
    }
  }
}

void FsdpState::root_pre_forward(const Tensor& input) {
  if (in_backward_) abandon_backward();  // the last backward threw before it finished
  in_forward_ = true;
  if (GradMode::is_enabled() && input.defined()) rows_ += input.dim() > 0 ? input.size(0) : 1;
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

void FsdpState::cast_forward_input(Tensor& input) const {
  const MixedPrecision& policy = options_.mixed_precision;
  if (!policy.param_dtype || !policy.cast_forward_inputs) return;
  if (input.defined() && is_floating(input.dtype()) && input.dtype() != *policy.param_dtype) {
    input = input.to(*policy.param_dtype);
  }
}

void FsdpState::cast_forward_output(Tensor& output) const {
  const MixedPrecision& policy = options_.mixed_precision;
  if (!policy.param_dtype || !policy.output_dtype) return;
  if (output.defined() && is_floating(output.dtype()) && output.dtype() != *policy.output_dtype) {
    output = output.to(*policy.output_dtype);
  }
}

void FsdpState::check_inside_model_call(const Unit& unit) const {
  if (in_forward_ || in_backward_ || forward_methods_ > 0) return;
  throw ValueError(tessera::detail::concat(
      "FSDP unit '", unit.name(), "' ran outside a call of the sharded ", root_.type_name(),
      " (model.forward(x) called directly, or a submodule called on its own), where the root's own parameters are not "
      "gathered and the forward is not delimited: call model(x), not model.forward(x); run a method other than "
      "forward (e.g. generate) through fsdp::register_fsdp_forward_method(model, &", root_.type_name(), "::method)"));
}

void FsdpState::begin_forward_method() {
  root_pre_forward(Tensor());
  ++forward_methods_;
}

void FsdpState::end_forward_method() {
  if (--forward_methods_ == 0) root_post_forward();
}

void FsdpState::pre_forward(Unit& unit, std::span<Tensor> inputs) {
  if (nn::is_recomputing()) return recompute_pre_forward(&unit, inputs);
  check_inside_model_call(unit);
  cast_forward_inputs(inputs);
  // A forward method that called model(x) and goes on: the root's parameters stay gathered.
  if (!in_forward_ && forward_methods_ > 0) root_pre_forward(Tensor());
  if (!order_recorded_ && std::find(forward_order_.begin(), forward_order_.end(), &unit) == forward_order_.end()) {
    forward_order_.push_back(&unit);
  }
  unit.wait_gathered();
  prefetch_for_forward(unit);
}

void FsdpState::post_forward(Unit& unit, std::span<Tensor> outputs) {
  // A recomputation's backward follows at once: the unit stays gathered for it. With
  // reshard_after_forward = N it keeps its part of its N-rank group (unit.h).
  if (options_.strategy == ShardingStrategy::full_shard && !nn::is_recomputing()) unit.reshard_after_forward();
  cast_forward_outputs(outputs);
  if (!GradMode::is_enabled()) return;
  // Whichever output's gradient arrives first regathers the unit; the later ones find it
  // gathered (pre_backward is idempotent).
  for (Tensor& output : outputs) {
    if (!output.defined() || !output.requires_grad()) continue;
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
  // The outermost backward: a checkpointed unit's backward runs inside it (checkpoint.h).
  autograd::queue_final_callback([this] { finish_backward(); });
}

void FsdpState::recompute_pre_forward(Unit* unit, std::span<Tensor> inputs) {
  // Activation checkpointing's recomputation, in backward: the unit is gathered (its
  // backward comes next), the one before it prefetched; the forward's bookkeeping (its
  // order, the root's state) is left alone.
  if (unit == nullptr) return;
  cast_forward_inputs(inputs);
  unit->wait_gathered();
  prefetch_for_backward(*unit);
}

void FsdpState::pre_backward(Unit& unit) {
  begin_backward_once();
  unit.wait_gathered();
  prefetch_for_backward(unit);
}

void FsdpState::on_parameter_gradient(Unit& unit, size_t index, Tensor& parameter) {
  begin_backward_once();
  Tensor grad = parameter.grad();
  parameter.set_grad(Tensor());  // the gradient lives on in the unit's buffer
  if (grad.defined()) {
    unit.accumulate_gradient(index, grad);
  } else {
    unit.count_gradient();  // every piece came through the gradient sink
  }
  if (unit.gradients_received() == unit.gradients_expected()) finish_unit(unit);
}

void FsdpState::finish_unit(Unit& unit) {
  if (!no_sync) {
    // On CUDA the reduction runs on the collectives' stream while the device goes on with
    // the next unit's backward; it is waited for when the next reduction starts (at most
    // two unsharded gradients exist) or when backward ends. On the CPU it is waited for now.
    if (!row_weight_) row_weight_ = row_weight();
    finish_pending_reduction();
    unit.start_reduction(*row_weight_);
    if (unit.device().is_cuda()) {
      reducing_ = &unit;
    } else {
      unit.finish_reduction();
    }
  }
  unit.reset_gradient_count();
  if (options_.strategy != ShardingStrategy::no_shard && reshard_after_backward) unit.reshard();
}

void FsdpState::finish_pending_reduction() {
  if (reducing_ == nullptr) return;
  Unit* unit = reducing_;
  reducing_ = nullptr;
  unit->finish_reduction();
}

std::optional<RowWeight> FsdpState::row_weight() {
  if (options_.gradient_reduction != dist::ReduceOp::avg || group_->size() == 1 || units_.empty()) return std::nullopt;
  NoGradGuard no_grad;
  const Device device = units_.front()->device();  // where the group's collectives run
  Tensor mine = native::full({1}, static_cast<double>(rows_), DType::i64, device);
  Tensor all = native::empty({group_->size()}, DType::i64, device);
  group_->all_gather_into(all, mine);
  if (device.is_cpu()) {
    std::vector<int64_t> rows = all.to_vector<int64_t>();
    int64_t total = 0;
    for (int64_t count : rows) total += count;
    if (total == 0 || std::all_of(rows.begin(), rows.end(), [&](int64_t count) { return count == rows.front(); })) {
      return std::nullopt;
    }
    return RowWeight{.no_rows_here = rows_ == 0,
                     .factor = native::full({1}, static_cast<double>(rows_) / static_cast<double>(total), DType::f64,
                                            device)};
  }
  // On a GPU, reading the counts would make the host wait for the device: the weight is
  // computed there (equal rows then give 1 / world size, the average to rounding).
  Tensor total = native::to_dtype(native::sum(all, {}, false), DType::f64);
  return RowWeight{.no_rows_here = rows_ == 0,
                   .factor = native::binary(native::BinaryOp::div, native::to_dtype(mine, DType::f64), total)};
}

void FsdpState::wait_for_offloaded_reads() {
  // CPU offload: the optimizer writes the host shards next. One wait for the device covers
  // every unit's copies (usually already run: the last gradient's copy to the host waited).
  bool waited = false;
  for (auto& unit : units_) {
    if (!unit->host_reads_in_flight()) continue;
    if (waited) {
      unit->host_reads_done();
    } else {
      unit->wait_for_host_reads();
      waited = true;
    }
  }
}

void FsdpState::abandon_backward() {
  for (auto& unit : units_) {
    unit->abandon_backward();
    if (!unit->is_root()) unit->reshard();
  }
  reducing_ = nullptr;
  rows_ = 0;
  row_weight_.reset();
  in_backward_ = false;
}

void FsdpState::finish_backward() {
  // Units some of whose parameters got no gradient: reduce what arrived, in unit order so
  // that every rank issues the same collectives.
  for (auto& unit : units_) {
    if (unit->gradients_received() > 0) finish_unit(*unit);
  }
  finish_pending_reduction();
  for (auto& unit : units_) {
    if (!unit->is_root() && reshard_after_backward) unit->reshard();
  }
  wait_for_offloaded_reads();
  if (!no_sync) rows_ = 0;  // inside no_sync the rows add up until the reduction
  row_weight_.reset();
  in_backward_ = false;
}

}  // namespace tessera::fsdp::detail
