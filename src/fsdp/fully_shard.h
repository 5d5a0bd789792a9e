// Fully Sharded Data Parallel: every unit's parameters live as flat shards across ranks.
//
//   auto world = ts::dist::init(argc, argv);
//   Net model;
//   ts::fsdp::fully_shard(model, world);             // the seed's FSDP.apply(model)
//   ts::optim::SGD opt(model.parameters(), {.lr = 0.01});   // the shards
//   for (...) {
//     opt.zero_grad();
//     ts::Tensor loss = ts::nll_loss(model(x), y);   // call model(x): FSDP sees the forward
//     loss.backward();                               // gradients reduce-scattered per unit
//     opt.step();                                    // on shards only
//   }
//   ts::StateDict full = model.state_dict();          // gathered, PyTorch names (collective)
//
// fully_shard walks the module tree bottom-up and makes a unit of each module the wrap
// policy picks (default: every module that owns parameters); the root owns what is left.
// A unit's parameters become views into its gathered flat buffer while it exists; the
// module's parameters() then lists one flat shard per unit ("fc1._flat_param").
//
// Schedule (FULL_SHARD): before a unit's forward, all-gather its flat buffer; after its
// forward, free it (not the root's). When the gradient of the unit's output arrives, gather
// again; once all its parameter gradients are in, reduce-scatter them into the gradient
// shard and free the unsharded buffers. The next unit's all-gather is started while the
// current one computes (after the first step, which records the order). SHARD_GRAD_OP keeps
// parameters gathered from forward to backward; NO_SHARD keeps them whole and all-reduces
// gradients, like DDP.
//
// CUDA: move the model to the device first (model.to(Device::cuda(i)), or the `device`
// option). The group then carries CUDA tensors: an NCCL group (dist::new_group(world,
// Backend::nccl), one GPU per rank), the MPI world (several ranks sharing a GPU: staged
// through host memory), or the single-rank group. With NCCL, collectives run on their own
// streams (the gradient reductions on a duplicate() of the group that fully_shard makes,
// so a prefetched all-gather never queues behind a reduce-scatter): prefetched
// all-gathers and gradient reductions overlap compute (a unit's reduction is waited for
// when the next unit's starts, so at most two unsharded gradient buffers exist on CUDA,
// one on the CPU).
//
// Initialisation: parameters still deferred (never used) are filled slice by slice, each
// rank computing only its own elements from (seed, name, index): the full model is never
// built, and it is the same at every world size.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/dist/device_mesh.h"
#include "tessera/dist/process_group.h"
#include "tessera/fsdp/flat_layout.h"
#include "tessera/nn/module.h"

namespace tessera::fsdp {

enum class ShardingStrategy { full_shard, shard_grad_op, no_shard };

// Which modules become units. Evaluated bottom-up; `unwrapped_numel` counts the elements
// of the parameters in the module's subtree not yet in a unit. Containers (ModuleList,
// ModuleDict: never called, so a unit's hooks on them would never run) are never units:
// size_based passes over them, and a module_type or custom policy that picks one throws.
struct WrapPolicy {
  enum class Kind { owns_parameters, size_based, module_type, custom };
  Kind kind = Kind::owns_parameters;
  int64_t min_num_params = 100'000'000;  // size_based
  std::vector<std::string> type_names;   // module_type: Module::type_name() values
  std::function<bool(nn::Module& module, int64_t unwrapped_numel)> custom;

  static WrapPolicy owns_parameters() { return {}; }
  static WrapPolicy size_based(int64_t min_num_params);
  static WrapPolicy module_type(std::vector<std::string> type_names);
};

// Mixed precision (PyTorch's MixedPrecisionPolicy): the shards, their gradients and the
// optimizer's state keep the parameters' own dtype (the "master" copy, e.g. float32); the
// all-gather moves the shard cast to param_dtype, so forward and backward compute in it;
// gradients are reduced in reduce_dtype and land, cast back, in the shard's gradient.
//
//   model.to(ts::Device::cuda(0));
//   ts::fsdp::fully_shard(model, group, {.mixed_precision = {.param_dtype = ts::DType::bf16,
//                                                            .output_dtype = ts::DType::f32}});
struct MixedPrecision {
  // dtype of the gathered parameters, hence of the computation; unset: the shard's dtype
  // (no mixed precision).
  std::optional<DType> param_dtype{};
  // dtype gradients are reduce-scattered in; unset: param_dtype.
  std::optional<DType> reduce_dtype{};
  // When set, every unit's floating forward output is cast to it (so layers outside the
  // units, e.g. a loss without bfloat16 kernels, run in it).
  std::optional<DType> output_dtype{};
  // Every unit casts its floating forward input to param_dtype.
  bool cast_forward_inputs = true;

  bool enabled() const { return param_dtype.has_value(); }
};

// CPU offload (FSDP2's CPUOffloadPolicy): each unit's flat shard, its gradient and the
// optimizer's state live in host memory (pinned by default, so the device's DMA engines
// copy them directly), while the gathered parameters, the unsharded gradients and the
// activations stay on the compute device. Before the all-gather the shard is copied host
// -> device (queued on the compute stream, the host goes on); after the reduce-scatter the
// gradient shard is copied device -> host and added to the shard's gradient; the
// optimizer, given the host shards, steps on the CPU with its vectorised kernels. The
// device then holds the unsharded buffers and activations only. A sharded strategy is
// needed (NO_SHARD keeps whole parameters on the device). See docs/fsdp.md.
//
//   model.to(ts::Device::cuda(0));
//   ts::fsdp::fully_shard(model, group, {.offload_policy = ts::fsdp::CPUOffloadPolicy{}});
//   ts::optim::AdamW opt(model.parameters(), {.lr = 1e-4});   // host shards, CPU steps
//
// On a model on the CPU it moves only the accounting: shards, gradients and optimizer
// state come from the pinned host allocator (pinned_memory_stats()), the rest from the
// CPU's (memory_stats()), which is how the tests check the boundary without a GPU.
struct CPUOffloadPolicy {
  // Pinned (page-locked) host memory (pinned_host_allocator()); false: pageable memory,
  // whose copies are staged through the runtime's pinned buffers and waited for.
  bool pin_memory = true;
};

// FSDP2's reshard_after_forward: unset, a bool, or an int.
//   true:  each unit's gathered parameters are freed after its forward and gathered again,
//          over the whole group, for its backward (FULL_SHARD).
//   false: they are kept from forward to backward, one all-gather a step (SHARD_GRAD_OP).
//   N:     after its forward each unit keeps the 1/N of the gathered parameters that its
//          rank holds in a group of N consecutive ranks (ZeRO++'s hpZ; within one node when
//          N is the ranks per node), and its backward all-gathers over those N ranks only.
//          N must divide the group's size; 1 means false and the group's size means true.
class ReshardAfterForward {
 public:
  ReshardAfterForward() = default;  // unset: as the strategy says
  // Implicit, as FSDP2's Union[bool, int]: `.reshard_after_forward = false` or `= 8`.
  ReshardAfterForward(bool reshard) : set_(true), reshard_(reshard) {}
  template <class Int>
    requires(std::is_integral_v<Int> && !std::is_same_v<Int, bool>)
  ReshardAfterForward(Int group_size) : set_(true), group_size_(static_cast<int64_t>(group_size)) {}
  bool is_set() const { return set_; }
  bool is_int() const { return set_ && group_size_ != 0; }
  bool as_bool() const { return reshard_; }     // when set and not an int
  int64_t group_size() const { return group_size_; }  // when an int

 private:
  bool set_ = false;
  bool reshard_ = true;
  int64_t group_size_ = 0;
};

struct FullyShardOptions {
  ShardingStrategy strategy = ShardingStrategy::full_shard;
  // FSDP2's name for the choice after forward (above); unset: as `strategy` says. A value that
  // contradicts an explicit other strategy (true or an int with SHARD_GRAD_OP or NO_SHARD)
  // is a ValueError, and so is an int that does not divide the group's size.
  ReshardAfterForward reshard_after_forward{};
  WrapPolicy wrap_policy{};
  // How gradients are combined across ranks. avg (the default, for a loss that is a mean
  // over the rank's rows, as in PyTorch): the mean over every rank's rows. When every rank's
  // forwards saw as many rows (dim 0 of the model's input) it is PyTorch's average; when
  // they differ (a batch not divisible by the world size), each rank's gradient is weighted
  // by its share of the rows, which PyTorch's average gets wrong. This costs one all-gather
  // of a row count per backward. sum: when each rank's loss is already divided by the
  // global batch size (exact for any split, and no exchange).
  dist::ReduceOp gradient_reduction = dist::ReduceOp::avg;
  bool prefetch = true;
  // Moves the model there first (as model.to(device); parameters not yet used stay
  // deferred, so no full copy is made). Unset: shard where the parameters are. Shards,
  // gathered buffers and gradients live on the parameters' device.
  std::optional<Device> device{};
  MixedPrecision mixed_precision{};
  // Activation checkpointing (PyTorch's apply_activation_checkpointing): every module whose
  // type_name() is listed (e.g. {"Block"}) runs its forward without keeping activations and
  // recomputes it in backward, gathered again for it (nn/activation_checkpoint.h). Exact: losses and
  // gradients are bit-identical with it on or off.
  std::vector<std::string> activation_checkpointing{};
  // CPU offload; unset: everything stays on the compute device.
  std::optional<CPUOffloadPolicy> offload_policy{};
};

void fully_shard(nn::Module& root, std::shared_ptr<dist::ProcessGroup> group, const FullyShardOptions& options = {});

// Hybrid sharding (HSDP, FSDP2's fully_shard with a 2-D mesh, FSDP1's HYBRID_SHARD): the
// parameters are sharded within the mesh's shard group (the layout's world size is the
// shard group's size), and after each reduce-scatter the gradient shard is all-reduced
// across the replica group (the ranks that hold the same shards), with the same
// gradient_reduction (avg over shard group then replicas is the average over every rank).
// A 1 x N mesh is plain FSDP over N ranks, N x 1 is DDP. Checkpoints are written by the
// first replica and load at any world size. See hybrid.cpp and docs/fsdp.md.
//
//   auto mesh = ts::dist::init_device_mesh(world, {2, world->size() / 2});
//   ts::fsdp::fully_shard(model, mesh);
void fully_shard(nn::Module& root, std::shared_ptr<dist::DeviceMesh> mesh, const FullyShardOptions& options = {});

bool is_sharded(nn::Module& root);

// The original parameters of a sharded model under their full names, in the order
// named_parameters() gave them before fully_shard: the same tensors, to pick parameter
// groups by name or shape (an optimizer given them steps their segments of the shards).
// Their values exist only while their unit is gathered.
//
//   for (auto& [name, p] : ts::fsdp::named_original_parameters(model))
//     (p.dim() >= 2 ? decay : no_decay).push_back(p);
std::vector<std::pair<std::string, Tensor>> named_original_parameters(nn::Module& root);
// The group a sharded model's collectives run on: the one fully_shard was given.
// ValueError when `root` is not sharded.
dist::ProcessGroup& process_group(nn::Module& root);
// Hybrid sharding (fully_shard(model, mesh)): the group of the ranks that hold the same
// shards as this one, across which gradient shards are all-reduced; null without a mesh.
// ValueError when `root` is not sharded.
dist::ProcessGroup* replica_group(nn::Module& root);
// Frees every unit's gathered parameters, leaving each rank its shards (NO_SHARD keeps its
// whole flat parameters, which are its shards): what a forward does after each unit, for
// code that changes the shards behind the gathered copies (loading a checkpoint): call it
// before writing them. With CPU offload it also waits until the device has read the host
// shards (their copies to the device for the all-gathers do not wait).
// ValueError when `root` is not sharded.
void reshard(nn::Module& root);

// A method other than forward run as the sharded model's forward (FSDP2's
// register_fsdp_forward_method, e.g. for generate()): while it runs, the root's own
// parameters are gathered and the model's units may be called directly (outside model(x)
// a unit's forward is a ValueError, at every world size). FSDP2 patches the method in
// place; C++ cannot, so the call goes through the returned function (or a scope):
//
//   auto generate = ts::fsdp::register_fsdp_forward_method(model, &GPT::generate);
//   ts::Tensor tokens = generate(prompt, 20);            // model.generate(prompt, 20), sharded
//   { ts::fsdp::ForwardMethodScope scope(model); model.generate(prompt, 20); }   // the same
//
// Collective where the model's forward is (the root's all-gather).
class ForwardMethodScope {
 public:
  explicit ForwardMethodScope(nn::Module& root);
  ~ForwardMethodScope();
  // ValueError when `root` is not sharded; returns it.
  static nn::Module& check_sharded(nn::Module& root);
  ForwardMethodScope(const ForwardMethodScope&) = delete;
  ForwardMethodScope& operator=(const ForwardMethodScope&) = delete;

 private:
  nn::Module& root_;
};

template <class Model, class Owner, class Result, class... Args>
std::function<Result(Args...)> register_fsdp_forward_method(Model& model, Result (Owner::*method)(Args...)) {
  static_assert(std::is_base_of_v<Owner, Model>, "register_fsdp_forward_method: a method of the model's class");
  (void)ForwardMethodScope::check_sharded(model);
  return [&model, method](Args... args) -> Result {
    ForwardMethodScope scope(model);
    return (model.*method)(std::forward<Args>(args)...);
  };
}

// Gradient accumulation without communication: inside the scope, backward keeps unsharded
// gradients locally; the first backward after it reduce-scatters them all.
class NoSyncScope {
 public:
  explicit NoSyncScope(nn::Module& root);
  ~NoSyncScope();
  NoSyncScope(const NoSyncScope&) = delete;
  NoSyncScope& operator=(const NoSyncScope&) = delete;

 private:
  nn::Module& root_;
};

// FSDP2's explicit schedule (FSDPModule's methods; schedule_control.cpp). `root` is the
// sharded model; `module` one of its units' modules (wrapped by the policy) or the root
// itself (its own parameters' unit). Each is a ValueError naming the module when it is not
// a unit of `root`.
//
// Gradient accumulation with no communication, as FSDP2's recipe (docs/api/fsdp.md):
//   ts::fsdp::set_requires_gradient_sync(model, false);    // micro-batches 1..k-1: no bytes sent
//   ts::fsdp::set_reshard_after_backward(model, false);    // and no all-gather either
//   ... forward/backward ...
//   ts::fsdp::set_requires_gradient_sync(model, true);     // micro-batch k: the sum is reduced
//   ts::fsdp::set_reshard_after_backward(model, true);     // before the optimizer writes the shards
//
// With sync off (model.set_requires_gradient_sync(False); what NoSyncScope does for its
// scope) backward keeps each unit's unsharded gradient and sends nothing; the first
// backward with it on adds to them and reduces the sum.
void set_requires_gradient_sync(nn::Module& root, bool requires_gradient_sync);
bool requires_gradient_sync(nn::Module& root);
// false: a unit's gathered parameters stay after its backward, so the next forward needs
// no all-gather. The optimizer must not step while they are kept (it writes the shards,
// not the gathered copy): set it back to true for the last micro-batch, as with FSDP2.
void set_reshard_after_backward(nn::Module& root, bool reshard_after_backward);
// Which units `module`'s forward (backward) starts gathering when it begins, in place of
// the default (the next unit in forward order; the previous one in backward): FSDP2's
// set_modules_to_forward_prefetch / set_modules_to_backward_prefetch. An empty list
// prefetches nothing; reset_prefetch returns to the default.
void set_modules_to_forward_prefetch(nn::Module& root, nn::Module& module, const std::vector<nn::Module*>& modules);
void set_modules_to_backward_prefetch(nn::Module& root, nn::Module& module, const std::vector<nn::Module*>& modules);
void reset_prefetch(nn::Module& root);

// A unit's all-gather started by unshard(..., async_op = true): wait() returns once the
// parameters are gathered (FSDP2's UnshardHandle); a handle from a synchronous unshard is
// already done. Its destructor does not wait.
class UnshardHandle {
 public:
  UnshardHandle() = default;
  explicit UnshardHandle(std::function<void()> wait) : wait_(std::move(wait)) {}
  void wait() {
    if (wait_) std::exchange(wait_, nullptr)();
  }

 private:
  std::function<void()> wait_;
};
// Gathers `module`'s unit now (FSDP2's module.unshard()), e.g. to overlap the all-gather
// with work of one's own before the forward; its forward then finds it gathered. Collective
// over the model's group. reshard(root, module) frees it again.
UnshardHandle unshard(nn::Module& root, nn::Module& module, bool async_op = false);
void reshard(nn::Module& root, nn::Module& module);

// Full parameters inside the scope: every unit gathered, every parameter a view of its
// full buffer. With writeback, changes made to the parameters are copied into the shards
// when the scope ends. Collective.
//
//   {
//     ts::fsdp::SummonFullParams full(model);
//     ... read or change model's parameters ...
//     full.end();                   // writes back and reshards; a failure throws here
//   }
//
// end() is where a failure shows; without it the destructor ends the scope, and throws
// from there only when no other exception is unwinding the stack (a second exception
// would terminate the program): then the first exception wins and the scope's own error is
// dropped.
class SummonFullParams {
 public:
  explicit SummonFullParams(nn::Module& root, bool writeback = true);
  ~SummonFullParams() noexcept(false);
  SummonFullParams(const SummonFullParams&) = delete;
  SummonFullParams& operator=(const SummonFullParams&) = delete;

  // Writes back (with writeback) and reshards every unit; once.
  void end();

 private:
  nn::Module& root_;
  bool writeback_;
  bool ended_ = false;
  int exceptions_at_start_;  // std::uncaught_exceptions() when the scope began
};

// Module::apply with full parameters and writeback (the seed article's FSDP.apply).
void apply(nn::Module& root, const std::function<void(nn::Module&)>& fn);

// Clips the gradient norm over all shards (one all-reduce); returns the total norm before
// clipping, as torch.nn.utils.clip_grad_norm_.
double clip_grad_norm(nn::Module& root, double max_norm);

struct FullStateDictOptions {
  bool rank0_only = false;  // other ranks get an empty dict
};
// The unsharded state dict with the original names (what model.state_dict() returns once
// sharded). Collective.
StateDict full_state_dict(nn::Module& root, const FullStateDictOptions& options = {});
// Loads an unsharded state dict (every rank passes the full tensors; each keeps its slice).
// What model.load_state_dict() does once sharded. Strictness as Module::load_state_dict.
void load_full_state_dict(nn::Module& root, const StateDict& state, bool strict = true);
// The names and shapes load_full_state_dict expects (model.state_shapes() once sharded).
std::vector<std::pair<std::string, Shape>> full_state_shapes(nn::Module& root);

// How a sharded model is laid out: one entry per unit, in the order units were made.
struct UnitInfo {
  std::string name;     // the unit's module path, "(root)" for the root's leftovers
  FlatLayout layout;    // where each parameter sits in the flat vector
  ElementRange range;   // this rank's part of it
  Tensor shard;         // the flat shard (for NO_SHARD, the whole flat parameter)
};
std::vector<UnitInfo> units(nn::Module& root);

// Per-rank figures, from FSDP's own bookkeeping. Unsharded buffers are the gathered flat
// parameters and the unsharded flat gradients; with prefetch, at most two parameter
// buffers and one gradient buffer exist at once (plus the root's, kept through forward).
struct MemoryReport {
  int rank = 0, world_size = 1;
  int units = 0;
  int64_t parameter_shard_bytes = 0;  // the flat shards, padding included
  int64_t gradient_shard_bytes = 0;   // their gradients, where allocated
  int64_t padding_elements = 0;       // this rank's padding, summed over units
  int64_t largest_unit_bytes = 0;     // the largest unit's padded flat buffer
  int64_t unsharded_parameter_bytes = 0, peak_unsharded_parameter_bytes = 0;
  int64_t unsharded_gradient_bytes = 0, peak_unsharded_gradient_bytes = 0;
  int64_t peak_unsharded_bytes = 0;   // of the two together
  int64_t all_gathered_bytes = 0;     // bytes received by all-gathers, cumulative
  int64_t reduce_scattered_bytes = 0; // bytes fed to reduce-scatters (NO_SHARD: all-reduces), cumulative
  int64_t all_gathers = 0, reduce_scatters = 0;
  // Of the gradient reductions above, the all-reduces of units kept whole (NO_SHARD, and
  // every strategy over one rank without mixed precision or offload: over a group of one
  // they send nothing). str() names them apart from the reduce-scatters.
  int64_t all_reduced_bytes = 0, all_reduces = 0;
  // CPU offload: the parameter and gradient shards above are in host memory (pinned when
  // the policy says so), not on the compute device; the unsharded figures are on the device.
  bool offloaded = false;
  // Hybrid sharding: the gradient shards' all-reduces across replicas, the only bytes that
  // leave the shard group (everything above stays within it). 0 without a mesh.
  int replicas = 1;
  int replica = 0;                        // this rank's replica (its row of the mesh)
  int64_t replica_all_reduced_bytes = 0;  // bytes fed to them, cumulative
  int64_t replica_all_reduces = 0;
  // reshard_after_forward = N (hpZ): the N-rank group the backward gathers over (1: none),
  // the bytes the units keep between forward and backward (in unsharded_parameter_bytes
  // too), and the gathers over it, cumulative (also counted in all_gathers and
  // all_gathered_bytes, which then include both groups' gathers).
  int post_forward_group_size = 1;
  int64_t post_forward_shard_bytes = 0;
  int64_t post_forward_all_gathered_bytes = 0, post_forward_all_gathers = 0;
  std::string str() const;            // a short printable report
};
MemoryReport memory_report(nn::Module& root);
void reset_peak_unsharded(nn::Module& root);

}  // namespace tessera::fsdp
