// fully_shard: choosing units by the wrap policy and building them.
#include "tessera/fsdp/fully_shard.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "tessera/dist/new_group.h"
#include "tessera/fsdp/state.h"
#include "tessera/nn/activation_checkpoint.h"
#include "tessera/nn/sharded_parameter.h"
#include "tessera/tensor/native.h"

namespace tessera::fsdp {

using detail::FsdpState;
using detail::ParameterRef;
using detail::Unit;

WrapPolicy WrapPolicy::size_based(int64_t min_num_params) {
  WrapPolicy policy;
  policy.kind = Kind::size_based;
  policy.min_num_params = min_num_params;
  return policy;
}

WrapPolicy WrapPolicy::module_type(std::vector<std::string> type_names) {
  WrapPolicy policy;
  policy.kind = Kind::module_type;
  policy.type_names = std::move(type_names);
  return policy;
}

namespace {

// The parameters of the units made so far, by tensor: a weight registered by two modules
// (`head.weight = embedding.weight`) that lands in two units would be two copies in two
// flat parameters, each unit pointing it at its own buffer. Refused at every world size,
// naming both, before the second unit is built.
using ClaimedParameters = std::map<const TensorImpl*, std::pair<std::string, std::string>>;  // unit, name

void claim_parameters(const std::string& unit, const std::vector<ParameterRef>& parameters, ClaimedParameters& claimed) {
  for (const ParameterRef& p : parameters) {
    auto it = claimed.find(p.slot->impl());
    if (it == claimed.end()) continue;
    throw ValueError(tessera::detail::concat(
        "fully_shard: '", p.full_name, "' is the same tensor as '", it->second.second,
        "' (a tied weight), but they fall in two units ('", unit, "' and '", it->second.first,
        "'); a tied weight must be in one unit with every module that uses it: leave both to the root, or wrap a "
        "module that holds both"));
  }
  for (const ParameterRef& p : parameters) claimed.emplace(p.slot->impl(), std::make_pair(unit, p.full_name));
}

// Bottom-up unit selection: returns the parameters of `module`'s subtree not yet in a unit.
std::vector<ParameterRef> wrap(nn::Module& module, const std::string& prefix, bool is_root, FsdpState& state,
                               const FullyShardOptions& options, ClaimedParameters& claimed) {
  std::vector<ParameterRef> unwrapped;
  for (auto& [name, child] : module.named_children()) {
    std::vector<ParameterRef> below = wrap(*child, prefix + name + ".", false, state, options, claimed);
    unwrapped.insert(unwrapped.end(), below.begin(), below.end());
  }
  bool owns_parameters = false;
  for (auto& [name, slot] : module.parameter_slots()) {
    if (!slot->defined()) continue;
    owns_parameters = true;
    unwrapped.push_back({&module, name, slot, prefix + name});
  }
  // Own parameters first (registration order), then children's, as named_parameters lists them.
  std::stable_partition(unwrapped.begin(), unwrapped.end(), [&](const ParameterRef& p) { return p.owner == &module; });
  if (unwrapped.empty() || is_root) return unwrapped;

  int64_t numel = 0;
  for (const ParameterRef& p : unwrapped) numel += p.slot->numel();
  bool make_unit = false;
  switch (options.wrap_policy.kind) {
    case WrapPolicy::Kind::owns_parameters: make_unit = owns_parameters; break;
    case WrapPolicy::Kind::size_based: make_unit = numel >= options.wrap_policy.min_num_params; break;
    case WrapPolicy::Kind::module_type: {
      const auto& names = options.wrap_policy.type_names;
      make_unit = std::find(names.begin(), names.end(), module.type_name()) != names.end();
      break;
    }
    case WrapPolicy::Kind::custom:
      TS_CHECK(options.wrap_policy.custom != nullptr, ValueError, "fully_shard: a custom wrap policy needs a function");
      make_unit = options.wrap_policy.custom(module, numel);
      break;
  }
  std::string unit_name = prefix.empty() ? std::string("(root)") : prefix.substr(0, prefix.size() - 1);
  if (module.is_container()) {
    // A container is never called, so a unit's gathering hooks on it would never run:
    // size-based wrapping passes over it (as PyTorch's excludes ModuleList and ModuleDict);
    // asking for it by type or by a custom policy is a mistake worth a clear message.
    TS_CHECK(!make_unit || options.wrap_policy.kind == WrapPolicy::Kind::size_based, ValueError, "fully_shard: '",
             unit_name, "' is a ", module.type_name(),
             ", a container that is never called, so it cannot be a unit; wrap the modules it holds instead");
    return unwrapped;
  }
  if (!make_unit) return unwrapped;
  claim_parameters(unit_name, unwrapped, claimed);
  state.add_unit(std::make_unique<Unit>(unit_name, module, std::move(unwrapped), state.group(), options.strategy,
                                        options.gradient_reduction, options.mixed_precision, false,
                                        state.counters(), options.offload_policy));
  return {};
}

void check_mixed_precision(const FullyShardOptions& options) {
  const MixedPrecision& policy = options.mixed_precision;
  auto check = [](const std::optional<DType>& dtype, const char* field) {
    TS_CHECK(!dtype || is_floating(*dtype), DTypeError, "fully_shard: MixedPrecision::", field,
             " must be a floating dtype, got ", dtype_name(*dtype));
  };
  check(policy.param_dtype, "param_dtype");
  check(policy.reduce_dtype, "reduce_dtype");
  check(policy.output_dtype, "output_dtype");
  TS_CHECK(policy.param_dtype || (!policy.reduce_dtype && !policy.output_dtype), ValueError,
           "fully_shard: MixedPrecision needs param_dtype when reduce_dtype or output_dtype is set");
  TS_CHECK(!policy.param_dtype || options.strategy != ShardingStrategy::no_shard, ValueError,
           "fully_shard: mixed precision needs a sharded strategy (FULL_SHARD or SHARD_GRAD_OP), not NO_SHARD");
}

// Every type a module_type policy names must be a module of this model: a misspelt one
// ("block" for Block) would silently leave everything to the root unit.
void check_wrap_types(nn::Module& root, const WrapPolicy& policy) {
  if (policy.kind != WrapPolicy::Kind::module_type) return;
  std::set<std::string> present;
  for (nn::Module* module : root.modules()) present.insert(module->type_name());
  for (const std::string& wanted : policy.type_names) {
    if (present.count(wanted)) continue;
    std::string listed;
    for (const std::string& type : present) listed += (listed.empty() ? "" : ", ") + type;
    throw ValueError(tessera::detail::concat("fully_shard: WrapPolicy::module_type names '", wanted,
                                             "', which is the type_name() of no module of this model; its types are: ",
                                             listed));
  }
}

// Every parameter must be where the group's collectives can reach it: an NCCL group
// carries CUDA tensors of its own device only.
void check_devices(nn::Module& root, const dist::ProcessGroup& group) {
  if (group.backend() != dist::Backend::nccl) return;
  const Device expected = Device::cuda(dist::nccl_device(group));
  for (auto& [name, parameter] : root.named_parameters()) {
    TS_CHECK(parameter.device() == expected, DeviceError, "fully_shard: parameter '", name, "' is on ",
             parameter.device().str(), " but the NCCL group '", group.name(), "' carries tensors on ", expected.str(),
             "; call model.to(", expected.str(), ") first (or pass FullyShardOptions::device)");
  }
}

const char* strategy_name(ShardingStrategy strategy) {
  switch (strategy) {
    case ShardingStrategy::full_shard: return "FULL_SHARD";
    case ShardingStrategy::shard_grad_op: return "SHARD_GRAD_OP";
    case ShardingStrategy::no_shard: return "NO_SHARD";
  }
  return "?";
}

// FSDP2's reshard_after_forward, as the strategy it names: an int N that is 1 or the group's
// size is false or true; any other divisor of the size stays an int (hpZ, the N-rank
// post-forward group that fully_shard makes).
FullyShardOptions resolve_reshard_after_forward(FullyShardOptions options, const dist::ProcessGroup& group) {
  ReshardAfterForward& given = options.reshard_after_forward;
  if (!given.is_set()) return options;
  const std::string as_given = given.is_int() ? std::to_string(given.group_size()) : given.as_bool() ? "true" : "false";
  if (given.is_int()) {
    const int64_t n = given.group_size();
    TS_CHECK(n >= 1 && n <= group.size() && group.size() % n == 0, ValueError, "fully_shard: reshard_after_forward = ",
             n, " must divide the size of the group '", group.name(), "' (", group.size(),
             " ranks): it is the size of the smaller group each unit is resharded to after forward");
    if (n == 1 || n == group.size()) given = ReshardAfterForward(n == group.size());
  }
  const bool reshards = given.is_int() || given.as_bool();
  if (reshards) {
    TS_CHECK(options.strategy == ShardingStrategy::full_shard, ValueError, "fully_shard: reshard_after_forward = ",
             as_given, " contradicts strategy ",
             strategy_name(options.strategy), " (which keeps the parameters after forward); give one of the two");
  } else if (options.strategy == ShardingStrategy::full_shard) {
    options.strategy = ShardingStrategy::shard_grad_op;
  }
  return options;
}

}  // namespace

void fully_shard(nn::Module& root, std::shared_ptr<dist::ProcessGroup> group, const FullyShardOptions& given) {
  TS_CHECK(group != nullptr, ValueError, "fully_shard: no process group given");
  const FullyShardOptions options = resolve_reshard_after_forward(given, *group);
  for (nn::Module* module : root.modules()) {
    TS_CHECK(module->find_attachment<FsdpState>() == nullptr, ValueError, "fully_shard: ",
             module == &root ? std::string("this model") : "its submodule '" + module->path() + "'",
             " is already sharded; fully_shard applies once, to the root");
  }
  TS_CHECK(options.gradient_reduction != dist::ReduceOp::max, ValueError,
           "fully_shard: gradient_reduction must be sum or avg");
  check_mixed_precision(options);
  TS_CHECK(!options.offload_policy || options.strategy != ShardingStrategy::no_shard, ValueError,
           "fully_shard: CPU offload needs a sharded strategy (FULL_SHARD or SHARD_GRAD_OP), not NO_SHARD");
  if (!options.activation_checkpointing.empty()) {
    const std::vector<std::string>& types = options.activation_checkpointing;
    const int wrapped = nn::apply_activation_checkpointing(root, [&types](nn::Module& module) {
      return std::find(types.begin(), types.end(), module.type_name()) != types.end();
    });
    std::string listed;
    for (const std::string& type : types) listed += (listed.empty() ? "" : ", ") + type;
    TS_CHECK(wrapped > 0, ValueError, "fully_shard: activation_checkpointing names no module type of this model (",
             listed, ")");
  }
  check_wrap_types(root, options.wrap_policy);
  if (options.device) root.to(*options.device);
  check_devices(root, *group);
  auto state = std::make_shared<FsdpState>(root, std::move(group), options);
  ClaimedParameters claimed;
  std::vector<ParameterRef> rest = wrap(root, "", true, *state, options, claimed);
  if (!rest.empty()) {
    claim_parameters("(root)", rest, claimed);
    state->add_unit(std::make_unique<Unit>("(root)", root, std::move(rest), state->group(), options.strategy,
                                           options.gradient_reduction, options.mixed_precision, true,
                                           state->counters(), options.offload_policy));
  }
  // On NCCL the gradient reductions get a communicator, and so a stream, of their own: a
  // prefetched all-gather for the next unit's backward then never queues behind the
  // previous unit's reduce-scatter (duplicate() is collective: every rank is here).
  if (state->group().backend() == dist::Backend::nccl) {
    std::shared_ptr<dist::ProcessGroup> reductions = state->group().duplicate();
    for (auto& unit : state->units()) unit->set_reduction_group(*reductions);
    state->set_reduction_group(std::move(reductions));
  }
  if (options.reshard_after_forward.is_int()) {
    // Consecutive ranks, as a DeviceMesh's shard groups: one node's when N is its ranks.
    const int n = static_cast<int>(options.reshard_after_forward.group_size());
    TS_CHECK(state->group().backend() != dist::Backend::nccl, ValueError, "fully_shard: reshard_after_forward = ", n,
             " is built for MPI and single-process groups, not yet for the NCCL group '", state->group().name(), "'");
    const int part = state->group().rank() / n;
    state->set_post_forward_group(
        state->group().split(part, tessera::detail::concat(state->group().name(), ".post_forward.", part)));
  }
  // Expose the shards and hide the original parameters from parameters().
  for (auto& unit : state->units()) {
    for (const ParameterRef& p : unit->parameters()) p.owner->hide_parameter(p.local_name);
    unit->module().register_parameter("_flat_param", unit->shard());
    unit->mark_tensors(unit->is_root() ? "_flat_param" : unit->name() + "._flat_param");
  }
  root.set_state_dict_override([](nn::Module& m) { return full_state_dict(m); },
                               [](nn::Module& m, const StateDict& s, bool strict) { load_full_state_dict(m, s, strict); },
                               [](nn::Module& m) { return full_state_shapes(m); });
  state->install_hooks();
  state->register_memory_holders();
  root.attach(std::move(state));
}

std::vector<std::pair<std::string, Tensor>> named_original_parameters(nn::Module& root) {
  (void)detail::state_of(root);  // a clear error when the model is not sharded
  std::vector<std::pair<std::string, Tensor>> out;
  for (nn::Module* module : root.modules()) {
    for (auto& [name, slot] : module->parameter_slots()) {
      if (const nn::ShardedParameter* mark = nn::find_sharded_parameter(*slot)) out.emplace_back(mark->name, *slot);
    }
  }
  return out;
}

dist::ProcessGroup& process_group(nn::Module& root) { return detail::state_of(root).group(); }

dist::ProcessGroup* replica_group(nn::Module& root) { return detail::state_of(root).replica_group(); }

void reshard(nn::Module& root) {
  for (auto& unit : detail::state_of(root).units()) {
    unit->reshard();
    unit->wait_for_host_reads();  // CPU offload: the caller is about to write the shards
  }
}

}  // namespace tessera::fsdp
