// One FSDP unit at run time: its flat shard, its gathered buffer and unsharded gradient,
// and the collectives that move between them. schedule.cpp drives units from module and
// gradient hooks (fully_shard.cpp builds them, schedule_control.cpp holds FSDP2's explicit
// calls); this file knows nothing about the schedule.
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/dist/process_group.h"
#include "tessera/fsdp/flat_layout.h"
#include "tessera/fsdp/fully_shard.h"
#include "tessera/nn/module.h"

namespace tessera::fsdp::detail {

// A parameter as the unit found it: where it is registered and under which full name.
struct ParameterRef {
  nn::Module* owner = nullptr;
  std::string local_name;
  Tensor* slot = nullptr;
  std::string full_name;
};

// Byte counts shared by a model's units (memory_report reads them).
struct Counters {
  int64_t parameter_bytes = 0;  // gathered parameter buffers now
  int64_t gradient_bytes = 0;   // unsharded gradient buffers now
  int64_t peak_parameter_bytes = 0;
  int64_t peak_gradient_bytes = 0;
  int64_t peak_total_bytes = 0;
  int64_t all_gathered_bytes = 0;
  int64_t reduce_scattered_bytes = 0;
  int64_t all_gathers = 0;
  int64_t reduce_scatters = 0;
  int64_t all_reduced_bytes = 0;  // of the reductions above, those of units kept whole
  int64_t all_reduces = 0;
  int64_t replica_all_reduced_bytes = 0;  // hybrid sharding, across the replica group
  int64_t replica_all_reduces = 0;
  int64_t post_forward_all_gathered_bytes = 0;
  int64_t post_forward_all_gathers = 0;
  void add_parameter_bytes(int64_t delta) {
    parameter_bytes += delta;
    update_peaks();
  }
  void add_gradient_bytes(int64_t delta) {
    gradient_bytes += delta;
    update_peaks();
  }
  void update_peaks() {
    peak_parameter_bytes = std::max(peak_parameter_bytes, parameter_bytes);
    peak_gradient_bytes = std::max(peak_gradient_bytes, gradient_bytes);
    peak_total_bytes = std::max(peak_total_bytes, parameter_bytes + gradient_bytes);
  }
  void reset_peaks() {
    peak_parameter_bytes = parameter_bytes;
    peak_gradient_bytes = gradient_bytes;
    peak_total_bytes = parameter_bytes + gradient_bytes;
  }
};

// avg when ranks' forwards saw different numbers of rows: each rank's gradient is weighted
// by its rows / all ranks' rows and summed, the mean over every row (see schedule.cpp).
struct RowWeight {
  bool no_rows_here = false;  // the gradient becomes exactly zero (a loss over 0 rows is NaN)
  Tensor factor{};            // one float64 element on the unit's device
};

class Unit {
 public:
  // Builds the layout, fills this rank's shard from the parameters (deferred ones slice by
  // slice), and points every parameter at its view of the (not yet gathered) full buffer.
  // With mixed precision the shard keeps the parameters' dtype and the gathered buffer
  // (what the parameters view) is in its param_dtype. With an offload policy the shard
  // (and later its gradient) is in host memory; everything else stays on the device.
  Unit(std::string name, nn::Module& module, std::vector<ParameterRef> parameters, dist::ProcessGroup& group,
       ShardingStrategy strategy, dist::ReduceOp gradient_reduction, const MixedPrecision& mixed_precision,
       bool is_root, Counters& counters, const std::optional<CPUOffloadPolicy>& offload = std::nullopt);
  ~Unit();
  Unit(const Unit&) = delete;
  Unit& operator=(const Unit&) = delete;

  const std::string& name() const { return name_; }
  nn::Module& module() const { return module_; }
  bool is_root() const { return is_root_; }
  const FlatLayout& layout() const { return layout_; }
  const std::vector<ParameterRef>& parameters() const { return parameters_; }
  // The optimizer-visible flat shard (for NO_SHARD, the whole flat parameter).
  Tensor& shard() { return shard_; }
  bool sharded() const { return sharded_; }
  // The compute device: the gathered parameters', the unsharded gradient's (and, without
  // offload, the shard's).
  Device device() const { return device_; }
  // CPU offload: the shard and its gradient are in host memory.
  bool offloaded() const { return offload_.has_value(); }
  // CPU offload: a non-blocking copy of the host shard to the device may not have run yet
  // (offload.cpp). wait_for_host_reads() waits for the device when so; host_reads_done()
  // is for a caller that has waited for the device itself.
  bool host_reads_in_flight() const;
  void wait_for_host_reads();
  void host_reads_done();
  // True when the gathered parameters have another dtype than the shard.
  bool mixed_precision() const { return param_dtype_ != layout_.dtype(); }

  // Parameters: gathered (or being gathered) or released.
  bool gathered() const { return state_ != State::released; }
  void start_gather();   // asynchronous all-gather into the full buffer
  // Gathers if needed and waits. If the all-gather fails, its error is rethrown and the
  // unit is released again: the next forward gathers anew.
  void wait_gathered();
  void reshard();        // releases the full buffer (kept when shard_is_full())
  // reshard_after_forward = N (hpZ): after its forward the unit keeps the part of the full
  // buffer that this rank holds in `group` (its N consecutive ranks) and releases the rest;
  // its next gather is an all-gather over `group` from that part. Without a group, reshard().
  void set_post_forward_group(dist::ProcessGroup* group) { post_forward_group_ = group; }
  void reshard_after_forward();

  // Gradients: the unsharded gradient buffer collects each parameter's gradient.
  void accumulate_gradient(size_t index, const Tensor& grad);
  // One of a parameter's gradients added into the buffer as it arrives (its autograd
  // gradient sink), so that a tied weight's two gradients never wait side by side; true
  // when taken. Declined (the engine sums them first, as before) unless the buffer is this
  // backward's own (not kept from an earlier one by no_sync) and `grad` has the reduce
  // dtype: then 0 + a + b is what adding the sum a + b gave, bit for bit.
  bool add_gradient_contribution(size_t index, const Tensor& grad);
  // A parameter's gradients have all arrived (its post-accumulate hook), every one of them
  // through add_gradient_contribution.
  void count_gradient() { ++gradients_received_; }
  int gradients_received() const { return gradients_received_; }
  int gradients_expected() const { return static_cast<int>(parameters_.size()); }
  bool has_unsharded_gradient() const { return full_gradient_.defined(); }
  // Bytes now held by the gathered parameter buffer and by the unsharded gradient.
  // (None when the shard is the full buffer: see shard_is_full().)
  int64_t gathered_bytes() const { return shard_is_full_ ? 0 : static_cast<int64_t>(full_storage_->nbytes()); }
  // True when the shard is the whole flat parameter and serves as the gathered buffer (NO_SHARD,
  // or a group of one rank without mixed precision): nothing is gathered or allocated (the
  // parameters borrow the shard's bytes while the unit counts as gathered, and a sharded
  // strategy still releases them as at N ranks), its gradient collected in the buffer that
  // becomes the shard's gradient.
  bool shard_is_full() const { return shard_is_full_; }
  int64_t unsharded_gradient_bytes() const { return full_gradient_.defined() ? gradient_bytes() : 0; }
  int64_t post_forward_shard_bytes() const {
    return post_forward_shard_.defined() ? static_cast<int64_t>(post_forward_shard_.nbytes()) : 0;
  }
  // Reduce-scatters (NO_SHARD: all-reduces) the unsharded gradient into the shard's
  // gradient, adding to what is there, and frees it: start_reduction() issues the
  // collective, finish_reduction() waits for it and does the rest (nothing when none is
  // pending). reduce_gradients() is both. With a `weight`, the unsharded gradient is
  // multiplied by it and summed over ranks (avg with uneven rows); else it is reduced with
  // the unit's gradient_reduction.
  void start_reduction(const std::optional<RowWeight>& weight = std::nullopt);
  void finish_reduction();
  void reduce_gradients();
  // The group the gradient reductions go to (default: the unit's group). On NCCL, FSDP
  // gives them a duplicate, so that they have a stream of their own.
  void set_reduction_group(dist::ProcessGroup& group) { reduction_group_ = &group; }
  void drop_unsharded_gradient();
  // After a backward that threw part-way (a failed collective, an error in a hook): drops
  // its unsharded gradient, the count, and the gradients left on the parameters, so that
  // nothing of it reaches the next step. The shard's gradient is left as it was.
  void abandon_backward();
  // Hybrid sharding: the group of the ranks that hold the same shards; each reduced
  // gradient shard is all-reduced across it before it lands (hybrid.cpp). Null: none.
  void set_replica_group(dist::ProcessGroup* group) { replica_group_ = group; }
  dist::ProcessGroup* replica_group() const { return replica_group_; }
  void reset_gradient_count() {
    gradients_received_ = 0;
    gradient_buffer_is_this_backwards_ = false;
  }

  // This rank's slice of the full buffer copied back into the shard (after the full
  // parameters were changed in place).
  void write_back();
  // The full tensor of parameter `index` (a copy; the unit must be gathered).
  Tensor full_parameter(size_t index) const;
  // The unpadded-layout flat parameter in the shard's dtype, all-gathered from the shards
  // (with mixed precision the gathered buffer is in param_dtype; state dicts need this).
  // Collective.
  Tensor gather_full_precision();
  // Parameter `index`'s view of a flat tensor laid out as this unit's buffer.
  Tensor view_in(const Tensor& flat, size_t index) const;
  // Mixed precision's summon_full_params: the parameters become views of a full-precision
  // gathered copy (collective), and back to views of the buffer when it ends; with
  // writeback, this rank's slice of the copy (after the user's changes) goes into the shard.
  void begin_full_precision_summon();
  void end_full_precision_summon(bool writeback);
  // Copies parameter `index`'s elements that fall in this rank's shard from `full`.
  void load_parameter(size_t index, const Tensor& full);
  // Points every parameter slot at its view of the full buffer again (after a user
  // reassigned one); copies the slot's values into the buffer first.
  void repoint_parameters();
  // Leaves nn/sharded_parameter.h's marks on the shard (registered as `flat_name`) and on
  // every original parameter: which of its elements this rank holds, where in the shard.
  void mark_tensors(const std::string& flat_name);

 private:
  enum class State { released, gathering, gathered };
  Tensor view_of(size_t index) const;
  void allocate_full();
  void borrow_shard();  // shard_is_full(): the parameters show the shard's own bytes
  void release_full();  // frees the gathered buffer, whatever its state
  void drop_post_forward_shard();
  // "FSDP unit 'fc1' (fc1.weight [128, 9216], fc1.bias [128]), all-gathering its parameters
  // on rank 1: ", the start of an error from one of its collective steps.
  std::string context(std::string_view step) const;
  ElementRange shard_range() const { return layout_.shard_range(sharded_ ? group_.rank() : 0); }
  void all_reduce_across_replicas(const Tensor& reduced);  // hybrid.cpp
  // CPU offload's two copies (offload.cpp): the host shard to the compute device (queued,
  // not waited for, from pinned memory), and a reduced gradient shard to the host.
  Tensor shard_on_device(bool non_blocking);
  Tensor to_host(const Tensor& on_device) const;
  int64_t padded_bytes() const;    // the gathered buffer, in param_dtype
  int64_t gradient_bytes() const;  // the unsharded gradient, in reduce_dtype
  void add_to_gradient_buffer(size_t index, const Tensor& grad);  // grad in reduce_dtype

  std::string name_;
  std::string description_;  // the name and the parameters, for messages
  nn::Module& module_;
  std::vector<ParameterRef> parameters_;
  dist::ProcessGroup& group_;
  dist::ProcessGroup* reduction_group_ = &group_;
  dist::ProcessGroup* replica_group_ = nullptr;
  ShardingStrategy strategy_;
  dist::ReduceOp gradient_reduction_;
  bool is_root_;
  bool sharded_;
  bool shard_is_full_ = false;
  Counters& counters_;
  FlatLayout layout_;
  Device device_;
  DType param_dtype_ = DType::f32;
  DType reduce_dtype_ = DType::f32;
  std::optional<CPUOffloadPolicy> offload_;
  bool host_reads_in_flight_ = false;  // a non-blocking copy of the host shard may still run

  Tensor shard_;
  std::shared_ptr<Storage> full_storage_;  // the gathered buffer; 0 bytes when released
  Tensor full_;                            // [padded] over full_storage_
  Tensor full_gradient_;                   // [padded], while gradients are being collected
  std::shared_ptr<dist::Work> pending_gather_;
  std::shared_ptr<dist::Work> pending_reduction_;
  Tensor reducing_into_;                   // the reduction's output, until finish_reduction()
  Tensor summoned_;                        // mixed precision's full-precision summon
  dist::ProcessGroup* post_forward_group_ = nullptr;  // reshard_after_forward = N
  Tensor post_forward_shard_;  // [padded / N] in param_dtype, from the forward until the next gather
  State state_ = State::released;
  int gradients_received_ = 0;
  bool gradient_buffer_is_this_backwards_ = false;  // full_gradient_ made since the last reset_gradient_count()
};

}  // namespace tessera::fsdp::detail
