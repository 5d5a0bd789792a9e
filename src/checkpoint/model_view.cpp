#include "tessera/checkpoint/model_view.h"

#include "tessera/checkpoint/collective.h"

#include <set>

#include "tessera/fsdp/fully_shard.h"
#include "tessera/nn/sharded_parameter.h"

namespace tessera::checkpoint::detail {

ModelView ModelView::of(nn::Module& model, const optim::Optimizer* optimizer) {
  TS_CHECK(fsdp::is_sharded(model), ValueError, "checkpoint: the model (", model.type_name(),
           ") is not sharded; call fsdp::fully_shard(model, world) first (at one rank it costs nothing)");
  ModelView view;
  view.model = &model;
  view.group = &fsdp::process_group(model);
  const int world = view.group->size();

  std::vector<std::pair<std::string, Tensor>> named = model.named_parameters();
  std::set<std::string> unit_parameters;
  for (fsdp::UnitInfo& info : fsdp::units(model)) {
    ModelUnit unit;
    for (const auto& [name, parameter] : named) {
      if (parameter.is_same(info.shard)) unit.flat_parameter = name;
    }
    TS_CHECK(!unit.flat_parameter.empty(), ValueError, "checkpoint: the flat shard of unit '", info.name,
             "' is not among the model's parameters");
    unit.replicated = world > 1 && info.layout.world_size() == 1;
    for (const fsdp::FlatEntry& entry : info.layout.entries()) unit_parameters.insert(entry.name);
    unit.info = std::move(info);
    view.units.push_back(std::move(unit));
  }
  std::set<std::string> flat_names;
  for (const ModelUnit& unit : view.units) flat_names.insert(unit.flat_parameter);
  for (auto& [name, slot] : model.state_slots()) {
    if (unit_parameters.count(name) || flat_names.count(name)) continue;
    view.buffers.emplace_back(name, slot);
  }

  if (optimizer != nullptr) {
    const std::vector<Tensor>& params = optimizer->params();
    for (size_t i = 0; i < params.size(); ++i) {
      const nn::ShardedParameter* mark = nn::find_sharded_parameter(params[i]);
      const Tensor& shard = mark != nullptr ? mark->flat_shard : params[i];
      OptimizerParam where;
      bool found = false;
      for (size_t u = 0; u < view.units.size() && !found; ++u) {
        const ModelUnit& unit = view.units[u];
        if (!shard.is_same(unit.info.shard)) continue;
        found = true;
        where.unit = u;
        if (mark == nullptr) {
          where.name = unit.flat_parameter;
          where.numel = unit.info.shard.numel();
          continue;
        }
        const auto& entries = unit.info.layout.entries();
        for (size_t e = 0; e < entries.size(); ++e) {
          if (entries[e].name == mark->name) where.entry = static_cast<int>(e);
        }
        TS_CHECK(where.entry >= 0, ValueError, "checkpoint: ", optimizer->type_name(), " parameter ", i, " ('",
                 mark->name, "') is not in the layout of unit '", unit.info.name, "'");
        where.name = mark->name;
        where.shard_offset = mark->shard_offset;
        where.numel = mark->numel;
      }
      TS_CHECK(found, ValueError, "checkpoint: ", optimizer->type_name(), " parameter ", i, " (",
               mark != nullptr ? "'" + mark->name + "'" : params[i].str(),
               ") is neither a flat shard nor an original parameter of the model; build the optimizer from "
               "model.parameters() or fsdp::named_original_parameters(model) after fsdp::fully_shard");
      view.optimizer_params.push_back(std::move(where));
    }
  }
  return view;
}

void on_first_replica(nn::Module& model, const std::string& what, const std::function<void()>& step) {
  on_first_replica(fsdp::replica_group(model), what, step);
}

void on_first_replica(dist::ProcessGroup* replicas, const std::string& what, const std::function<void()>& step) {
  thread_local bool inside = false;
  if (replicas == nullptr || inside) return step();
  run_on_every_rank(*replicas, what, [&] {
    if (replicas->rank() != 0) return std::string();
    inside = true;
    try {
      step();
    } catch (...) {
      inside = false;
      throw;
    }
    inside = false;
    return std::string();
  });
}

fsdp::ElementRange save_range(int64_t flat_numel, int world_size, int rank) {
  const int64_t per_rank = (flat_numel + world_size - 1) / world_size;
  return {std::min(flat_numel, rank * per_rank), std::min(flat_numel, (rank + 1) * per_rank)};
}

}  // namespace tessera::checkpoint::detail
