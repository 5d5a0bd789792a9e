// Full (unsharded) state dicts of a sharded model, with the original parameter names and
// the single-process order, so that files open in PyTorch and load at any world size.
#include <map>
#include <set>

#include "tessera/autograd/grad_mode.h"
#include "tessera/fsdp/state.h"
#include "tessera/tensor/native.h"

namespace tessera::fsdp {

using detail::FsdpState;
using detail::Unit;

namespace {

struct Located {
  Unit* unit = nullptr;
  size_t index = 0;
};

// Where each sharded parameter slot lives; also the set of flat shards (not state).
std::map<const Tensor*, Located> locate(FsdpState& state, std::set<const Tensor*>& shards) {
  std::map<const Tensor*, Located> where;
  for (auto& unit : state.units()) {
    shards.insert(&unit->shard());
    for (size_t i = 0; i < unit->parameters().size(); ++i) where[unit->parameters()[i].slot] = {unit.get(), i};
  }
  return where;
}

}  // namespace

StateDict full_state_dict(nn::Module& root, const FullStateDictOptions& options) {
  FsdpState& state = detail::state_of(root);
  NoGradGuard no_grad;
  bool keep = !options.rank0_only || state.group().rank() == 0;
  // Gather unit by unit (every rank takes part), copying out the parameters.
  std::map<const Tensor*, Tensor> gathered;
  for (auto& unit : state.units()) {
    if (unit->mixed_precision()) {
      // The gathered buffer holds param_dtype copies; the state is the full-precision shards.
      Tensor flat = unit->gather_full_precision();
      if (keep) {
        for (size_t i = 0; i < unit->parameters().size(); ++i) {
          gathered[unit->parameters()[i].slot] = native::clone(unit->view_in(flat, i));
        }
      }
      continue;
    }
    bool was_gathered = unit->gathered();
    unit->wait_gathered();
    if (keep) {
      for (size_t i = 0; i < unit->parameters().size(); ++i) gathered[unit->parameters()[i].slot] = unit->full_parameter(i);
    }
    if (!was_gathered) unit->reshard();
  }
  StateDict out;
  if (!keep) return out;
  std::set<const Tensor*> shards;
  locate(state, shards);
  for (auto& [name, slot] : root.state_slots()) {
    if (shards.count(slot)) continue;
    auto it = gathered.find(slot);
    out.insert(name, it != gathered.end() ? it->second : native::clone(*slot));
  }
  return out;
}

std::vector<std::pair<std::string, Shape>> full_state_shapes(nn::Module& root) {
  std::set<const Tensor*> shards;
  locate(detail::state_of(root), shards);
  std::vector<std::pair<std::string, Shape>> shapes;
  for (auto& [name, slot] : root.state_slots()) {
    if (!shards.count(slot)) shapes.emplace_back(name, slot->sizes());
  }
  return shapes;
}

void load_full_state_dict(nn::Module& root, const StateDict& state_dict, bool strict) {
  FsdpState& state = detail::state_of(root);
  std::set<const Tensor*> shards;
  std::map<const Tensor*, Located> where = locate(state, shards);
  std::vector<std::pair<std::string, Tensor*>> slots;
  for (auto& [name, slot] : root.state_slots()) {
    if (!shards.count(slot)) slots.emplace_back(name, slot);
  }
  nn::check_state_dict_match(full_state_shapes(root), state_dict, strict, root.type_name() + " (sharded)");

  NoGradGuard no_grad;
  for (auto& [name, slot] : slots) {
    if (!state_dict.contains(name)) continue;
    auto it = where.find(slot);
    if (it != where.end()) {
      it->second.unit->load_parameter(it->second.index, state_dict.at(name));
    } else {
      native::copy_(*slot, state_dict.at(name));
    }
  }
  // Gathered buffers now hold stale values: release them (NO_SHARD buffers are the shards).
  for (auto& unit : state.units()) unit->reshard();
}

// With mixed precision the parameters are summoned in full precision (the shards' dtype),
// not as the param_dtype copies forward uses, so that writeback does not round the shards.
SummonFullParams::SummonFullParams(nn::Module& root, bool writeback) : root_(root), writeback_(writeback) {
  for (auto& unit : detail::state_of(root_).units()) {
    if (unit->mixed_precision()) {
      unit->begin_full_precision_summon();
    } else {
      unit->wait_gathered();
    }
  }
}

SummonFullParams::~SummonFullParams() noexcept(false) {
  FsdpState& state = detail::state_of(root_);
  for (auto& unit : state.units()) {
    if (unit->mixed_precision()) {
      unit->end_full_precision_summon(writeback_);
      unit->reshard();  // a gathered param_dtype buffer may predate the writeback
      continue;
    }
    if (writeback_) {
      unit->repoint_parameters();
      unit->write_back();
    }
    if (!unit->is_root()) unit->reshard();
  }
}

void apply(nn::Module& root, const std::function<void(nn::Module&)>& fn) {
  SummonFullParams full(root, true);
  NoGradGuard no_grad;
  root.apply(fn);
}

}  // namespace tessera::fsdp
