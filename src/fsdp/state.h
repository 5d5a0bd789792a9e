// The FSDP state of a sharded model (internal): its units and the schedule that drives
// them from module and gradient hooks. Kept alive by the root module as an attachment.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "tessera/fsdp/fully_shard.h"
#include "tessera/fsdp/unit.h"
#include "tessera/tensor/memory_limit.h"

namespace tessera::fsdp::detail {

class FsdpState final : public nn::ModuleAttachment {
 public:
  FsdpState(nn::Module& root, std::shared_ptr<dist::ProcessGroup> group, const FullyShardOptions& options)
      : root_(root), group_(std::move(group)), options_(options) {}

  nn::Module& root() { return root_; }
  dist::ProcessGroup& group() { return *group_; }
  const FullyShardOptions& options() const { return options_; }
  std::vector<std::unique_ptr<Unit>>& units() { return units_; }
  detail::Counters& counters() { return counters_; }
  // Gradient accumulation without communication: set_requires_gradient_sync(false) or a
  // NoSyncScope.
  bool no_sync = false;
  // set_reshard_after_backward(false): units stay gathered after their backward.
  bool reshard_after_backward = true;
  // set_modules_to_forward_prefetch / _backward_prefetch: a unit's explicit prefetch
  // targets, in place of its neighbour in forward order (schedule_control.cpp).
  using PrefetchTargets = std::unordered_map<const Unit*, std::vector<Unit*>>;
  PrefetchTargets forward_prefetch, backward_prefetch;
  // The unit of `module` (a wrapped submodule, or the root for its own parameters);
  // ValueError naming the module when it has none.
  Unit& unit_of(nn::Module& module, const char* caller);

  void add_unit(std::unique_ptr<Unit> unit) { units_.push_back(std::move(unit)); }
  // Hybrid sharding (hybrid.cpp): the mesh, and its replica group (null without one, or
  // with a single replica).
  void set_mesh(std::shared_ptr<dist::DeviceMesh> mesh);
  const std::shared_ptr<dist::DeviceMesh>& mesh() const { return mesh_; }
  dist::ProcessGroup* replica_group() const;
  // Lists the shards and unsharded buffers in OutOfMemoryError messages (memory_holders.cpp).
  void register_memory_holders();
  // The group of the units' gradient reductions, when it is not group() (see fully_shard.cpp).
  void set_reduction_group(std::shared_ptr<dist::ProcessGroup> group) { reduction_group_ = std::move(group); }
  // reshard_after_forward = N: the N-rank group each unit's backward gathers over (null: none).
  void set_post_forward_group(std::shared_ptr<dist::ProcessGroup> group) {
    post_forward_group_ = std::move(group);
    for (auto& unit : units_) unit->set_post_forward_group(post_forward_group_.get());
  }
  const dist::ProcessGroup* post_forward_group() const { return post_forward_group_.get(); }
  void install_hooks();

  // Schedule steps. `input` is the model's (or, called directly, the unit's) first tensor
  // argument; `inputs` and `outputs` are every tensor of a unit's call (Module::call).
  void root_pre_forward(const Tensor& input);
  void root_post_forward();
  void pre_forward(Unit& unit, std::span<Tensor> inputs);
  // A method other than forward run as the model's forward (register_fsdp_forward_method):
  // the root's parameters gathered, its units allowed to run; nested calls are counted.
  void begin_forward_method();
  void end_forward_method();
  void post_forward(Unit& unit, std::span<Tensor> outputs);
  void pre_backward(Unit& unit);
  // Before a checkpointed call's recomputation enters `unit` (null: the root without a unit).
  void recompute_pre_forward(Unit* unit, std::span<Tensor> inputs);
  void on_parameter_gradient(Unit& unit, size_t index, Tensor& parameter);
  void finish_backward();

 private:
  void begin_backward_once();
  // A backward that threw part-way never ran finish_backward(): undo what it left behind
  // (called by the next forward), so that a caught error leaves the model usable.
  void abandon_backward();
  void finish_unit(Unit& unit);
  // A unit's forward outside model(x) (model.forward(x) called directly, a submodule called
  // on its own): ValueError at every world size, with the way to call it.
  void check_inside_model_call(const Unit& unit) const;
  void wait_for_offloaded_reads();  // CPU offload, at the end of backward (offload.cpp says why)
  void finish_pending_reduction();
  // Mixed precision's casts of a unit's forward inputs and outputs (in place, recorded by autograd).
  void cast_forward_input(Tensor& input) const;
  void cast_forward_output(Tensor& output) const;
  void cast_forward_inputs(std::span<Tensor> inputs) const {
    for (Tensor& input : inputs) cast_forward_input(input);
  }
  void cast_forward_outputs(std::span<Tensor> outputs) const {
    for (Tensor& output : outputs) cast_forward_output(output);
  }
  Unit* neighbour(const Unit& unit, int step) const;
  // Starts the all-gathers `unit`'s forward (backward) prefetches: the explicit targets,
  // or the next (previous) unit in forward order.
  void prefetch_for_forward(const Unit& unit);
  void prefetch_for_backward(const Unit& unit);
  // `unit`'s explicit targets if it has some, else its neighbour `default_step` units away
  // in forward order (none for 0, or with prefetch off).
  void prefetch(const Unit& unit, const PrefetchTargets& explicit_targets, int default_step);
  // avg over ranks whose forwards saw different numbers of rows: this rank's weight,
  // rows / all ranks' rows, exchanged once per reduction (one all-gather of a count); none
  // when gradients are summed, or (on the CPU) when every rank saw as many rows: the plain
  // average is then the mean over all rows.
  std::optional<RowWeight> row_weight();

  nn::Module& root_;
  std::shared_ptr<dist::ProcessGroup> group_;
  std::shared_ptr<dist::ProcessGroup> reduction_group_;
  std::shared_ptr<dist::ProcessGroup> post_forward_group_;
  std::shared_ptr<dist::DeviceMesh> mesh_;
  std::unique_ptr<MemoryHolderRegistration> memory_holders_;
  FullyShardOptions options_;
  std::vector<std::unique_ptr<Unit>> units_;
  detail::Counters counters_;
  std::vector<Unit*> forward_order_;  // units in the order the first forward ran them
  bool order_recorded_ = false;
  bool in_forward_ = false;
  bool in_backward_ = false;
  int forward_methods_ = 0;  // register_fsdp_forward_method calls in progress
  // The CUDA unit whose gradient reduction is in flight (waited for when the next starts).
  Unit* reducing_ = nullptr;
  // Rows (dim 0 of the input) of this rank's forwards with grad mode on since the last
  // gradient reduction, and this backward's row weight once exchanged.
  int64_t rows_ = 0;
  std::optional<std::optional<RowWeight>> row_weight_;
};

// The state of a sharded root; throws ValueError when `root` is not sharded.
FsdpState& state_of(nn::Module& root);
// The unit holding the root's leftover parameters, or null.
Unit* root_unit(FsdpState& state);

}  // namespace tessera::fsdp::detail
