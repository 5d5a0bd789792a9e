// FSDP2's explicit schedule (fully_shard.h): gradient sync, resharding after backward,
// explicit prefetch targets, unshard/reshard of one unit. The hooks in schedule.cpp read
// what these set.
#include <algorithm>

#include "tessera/fsdp/state.h"

namespace tessera::fsdp {

namespace detail {

Unit& FsdpState::unit_of(nn::Module& module, const char* caller) {
  for (auto& unit : units_) {
    if (&unit->module() == &module) return *unit;
  }
  std::string names;
  for (auto& unit : units_) names += (names.empty() ? "" : ", ") + unit->name();
  throw ValueError(tessera::detail::concat(
      caller, ": ", &module == &root_ ? std::string("the root") : "module '" + module.path() + "'",
      " (", module.type_name(), ") is not an FSDP unit of this ", root_.type_name(), "; its units are ", names));
}

void FsdpState::prefetch_for_forward(const Unit& unit) {
  // The default forward prefetch follows the order the first forward recorded.
  prefetch(unit, forward_prefetch, order_recorded_ ? +1 : 0);
}

void FsdpState::prefetch_for_backward(const Unit& unit) { prefetch(unit, backward_prefetch, -1); }

void FsdpState::prefetch(const Unit& unit, const PrefetchTargets& explicit_targets, int default_step) {
  if (auto found = explicit_targets.find(&unit); found != explicit_targets.end()) {
    for (Unit* target : found->second) target->start_gather();
    return;
  }
  if (!options_.prefetch || default_step == 0) return;
  if (Unit* neighbour_unit = neighbour(unit, default_step)) neighbour_unit->start_gather();
}

}  // namespace detail

namespace {

std::vector<detail::Unit*> units_of(detail::FsdpState& state, const std::vector<nn::Module*>& modules,
                                    const char* caller) {
  std::vector<detail::Unit*> units;
  for (nn::Module* module : modules) {
    TS_CHECK(module != nullptr, ValueError, caller, ": a null module in the list");
    units.push_back(&state.unit_of(*module, caller));
  }
  return units;
}

}  // namespace

void set_requires_gradient_sync(nn::Module& root, bool requires_gradient_sync) {
  detail::state_of(root).no_sync = !requires_gradient_sync;
}

bool requires_gradient_sync(nn::Module& root) { return !detail::state_of(root).no_sync; }

void set_reshard_after_backward(nn::Module& root, bool reshard_after_backward) {
  detail::state_of(root).reshard_after_backward = reshard_after_backward;
}

void set_modules_to_forward_prefetch(nn::Module& root, nn::Module& module, const std::vector<nn::Module*>& modules) {
  detail::FsdpState& state = detail::state_of(root);
  const char* caller = "set_modules_to_forward_prefetch";
  state.forward_prefetch[&state.unit_of(module, caller)] = units_of(state, modules, caller);
}

void set_modules_to_backward_prefetch(nn::Module& root, nn::Module& module, const std::vector<nn::Module*>& modules) {
  detail::FsdpState& state = detail::state_of(root);
  const char* caller = "set_modules_to_backward_prefetch";
  state.backward_prefetch[&state.unit_of(module, caller)] = units_of(state, modules, caller);
}

void reset_prefetch(nn::Module& root) {
  detail::FsdpState& state = detail::state_of(root);
  state.forward_prefetch.clear();
  state.backward_prefetch.clear();
}

UnshardHandle unshard(nn::Module& root, nn::Module& module, bool async_op) {
  detail::Unit& unit = detail::state_of(root).unit_of(module, "unshard");
  unit.start_gather();
  if (!async_op) {
    unit.wait_gathered();
    return UnshardHandle();
  }
  return UnshardHandle([&unit] { unit.wait_gathered(); });
}

void reshard(nn::Module& root, nn::Module& module) {
  detail::Unit& unit = detail::state_of(root).unit_of(module, "reshard");
  unit.reshard();
  unit.wait_for_host_reads();
}

}  // namespace tessera::fsdp
