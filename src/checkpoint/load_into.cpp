#include "tessera/checkpoint/load_into.h"

#include <map>
#include <set>

#include "tessera/autograd/grad_mode.h"
#include "tessera/checkpoint/collective.h"
#include "tessera/checkpoint/errors.h"
#include "tessera/checkpoint/model_view.h"
#include "tessera/fsdp/fully_shard.h"
#include "tessera/io/crc32c.h"
#include "tessera/tensor/factory.h"
#include "tessera/tensor/native.h"

namespace tessera::checkpoint::detail {

namespace {

std::string describe_unit(const std::string& name, DType dtype, int64_t flat_numel,
                          const std::vector<fsdp::FlatEntry>& parameters) {
  std::string names;
  for (const fsdp::FlatEntry& entry : parameters) names += (names.empty() ? "" : ", ") + entry.name + " " + shape_str(entry.shape);
  return tessera::detail::concat("'", name, "' (", dtype_name(dtype), ", ", flat_numel, " elements: ", names, ")");
}

// ValueError unless `record` describes the unit the model has.
void check_unit(const UnitRecord& record, const fsdp::UnitInfo& info, const std::string& what) {
  const fsdp::FlatLayout& layout = info.layout;
  bool same = record.dtype == layout.dtype() && record.flat_numel == layout.flat_numel() &&
              record.parameters.size() == layout.entries().size();
  for (size_t i = 0; same && i < record.parameters.size(); ++i) {
    const fsdp::FlatEntry& a = record.parameters[i];
    const fsdp::FlatEntry& b = layout.entries()[i];
    same = a.name == b.name && a.shape == b.shape && a.offset == b.offset;
  }
  TS_CHECK(same, ValueError, what, ": unit ", describe_unit(record.name, record.dtype, record.flat_numel, record.parameters),
           " in the checkpoint differs from the model's ",
           describe_unit(info.name, layout.dtype(), layout.flat_numel(), layout.entries()));
}

// What a rank read, waiting to be committed.
struct Prepared {
  std::vector<Tensor> shards;  // per model unit
  StateDict optimizer_state;   // in Optimizer::state_dict's layout; empty when not loading one
  StateDict scheduler_state;
  std::vector<Tensor> buffers;  // per model buffer
  uint32_t fingerprint = 0;
};

// This rank's shard of flat tensor `state` of manifest unit `index`: zeros (the padding)
// with the unpadded part read from the source.
Tensor read_shard(const FlatSource& source, size_t index, const std::string& state, const fsdp::UnitInfo& info) {
  Tensor shard = native::zeros({info.shard.numel()}, info.layout.dtype(), Device::cpu());
  const int64_t flat = info.layout.flat_numel();
  const int64_t begin = std::min(info.range.begin, flat), end = std::min(info.range.end, flat);
  if (end > begin) source.read(index, state, begin, native::narrow(shard, 0, 0, end - begin));
  return shard;
}

std::string names_of(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return "[" + out + "]";
}

// The checkpoint's optimizer state in Optimizer::state_dict's layout for `optimizer`: its
// groups must hold the same parameters (by name) as the checkpoint's; each
// parameter's per-element state is its segment of this rank's shard of the unit's flat
// state (the whole shard for a flat-shard parameter).
StateDict prepare_optimizer(const FlatSource& source, const ModelView& view, const optim::Optimizer& optimizer,
                            const std::vector<size_t>& record_of, const std::string& what) {
  const Manifest& manifest = source.manifest();
  TS_CHECK(!manifest.optimizer.empty(), ValueError, what, ": the checkpoint holds no optimizer state, but an ",
           optimizer.type_name(), " was given to load");
  TS_CHECK(manifest.optimizer == optimizer.type_name(), ValueError, what, ": the checkpoint holds ",
           manifest.optimizer, " state, but the optimizer is ", optimizer.type_name());
  TS_CHECK(manifest.optimizer_groups.size() == optimizer.param_group_count(), ValueError, what, ": the checkpoint's ",
           manifest.optimizer, " has ", manifest.optimizer_groups.size(), " parameter group(s), the optimizer ",
           optimizer.param_group_count());
  StateDict out;
  size_t first = 0;
  for (size_t g = 0; g < manifest.optimizer_groups.size(); ++g) {
    const OptimizerGroupRecord& record = manifest.optimizer_groups[g];
    std::vector<std::string> names;
    const size_t count = optimizer.params(g).size();
    for (size_t i = first; i < first + count; ++i) names.push_back(view.optimizer_params[i].name);
    // State is matched by name, so only the membership of a group matters, not its order.
    TS_CHECK(std::set<std::string>(names.begin(), names.end()) ==
                 std::set<std::string>(record.params.begin(), record.params.end()),
             ValueError, what, ": parameter group ", g, " of the checkpoint holds ", names_of(record.params),
             " but the optimizer's holds ", names_of(names), " (build the optimizer's groups as the saved run did)");
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    for (const auto& [name, value] : record.hyperparameters) out.insert(prefix + name, value);
    std::vector<int64_t> indices(count);
    for (size_t k = 0; k < count; ++k) indices[k] = static_cast<int64_t>(first + k);
    out.insert(prefix + "params", tensor<int64_t>(indices, {static_cast<int64_t>(count)}));
    first += count;
  }
  std::map<std::pair<size_t, std::string>, Tensor> shards;  // (model unit, state) -> this rank's shard
  for (size_t i = 0; i < view.optimizer_params.size(); ++i) {
    const OptimizerParam& where = view.optimizer_params[i];
    const OptimizerStateRecord* record = manifest.find_optimizer_state(where.name);
    if (record == nullptr) continue;
    // Scalars first: the order Tessera's optimizers create their state in ("step", then tensors).
    const std::string prefix = "state." + std::to_string(i) + ".";
    for (const auto& [name, value] : record->scalars) out.insert(prefix + name, value);
    for (const std::string& state : record->tensors) {
      auto key = std::make_pair(where.unit, state);
      if (!shards.count(key)) shards[key] = read_shard(source, record_of[where.unit], state, view.units[where.unit].info);
      const Tensor& shard = shards.at(key);
      out.insert(prefix + state, where.entry < 0 ? shard : native::clone(native::narrow(shard, 0, where.shard_offset, where.numel)));
    }
  }
  return out;
}

Prepared prepare(const FlatSource& source, const ModelView& view, const Stateful& with, const std::string& what) {
  const Manifest& manifest = source.manifest();
  Prepared prepared;
  std::string text = io::json::write(to_json(manifest));
  prepared.fingerprint = io::crc32c(text.data(), text.size());

  std::set<std::string> model_units;
  for (const ModelUnit& unit : view.units) model_units.insert(unit.info.name);
  for (const UnitRecord& record : manifest.units) {
    TS_CHECK(model_units.count(record.name), ValueError, what, ": the checkpoint's unit ",
             describe_unit(record.name, record.dtype, record.flat_numel, record.parameters),
             " is not a unit of the model (shard the model with the same wrap policy)");
  }
  std::vector<size_t> record_of;  // manifest index per model unit
  for (const ModelUnit& unit : view.units) {
    const UnitRecord* record = manifest.find_unit(unit.info.name);
    TS_CHECK(record != nullptr, ValueError, what, ": the model's unit ",
             describe_unit(unit.info.name, unit.info.layout.dtype(), unit.info.layout.flat_numel(),
                           unit.info.layout.entries()),
             " is not in the checkpoint");
    check_unit(*record, unit.info, what);
    record_of.push_back(static_cast<size_t>(record - manifest.units.data()));
  }

  for (size_t k = 0; k < view.units.size(); ++k) {
    prepared.shards.push_back(read_shard(source, record_of[k], "", view.units[k].info));
  }
  if (with.optimizer != nullptr) prepared.optimizer_state = prepare_optimizer(source, view, *with.optimizer, record_of, what);

  if (with.scheduler != nullptr) {
    TS_CHECK(!manifest.scheduler.empty(), ValueError, what, ": the checkpoint holds no scheduler state, but a ",
             with.scheduler->type_name(), " was given to load");
    TS_CHECK(manifest.scheduler == with.scheduler->type_name(), ValueError, what, ": the checkpoint holds ",
             manifest.scheduler, " state, but the scheduler is a ", with.scheduler->type_name());
    prepared.scheduler_state = manifest.scheduler_state;
  }

  std::set<std::string> model_buffers;
  for (const auto& [name, slot] : view.buffers) {
    model_buffers.insert(name);
    const BufferRecord* record = nullptr;
    for (const BufferRecord& candidate : manifest.buffers) {
      if (candidate.name == name) record = &candidate;
    }
    TS_CHECK(record != nullptr, ValueError, what, ": the model's buffer '", name, "' is not in the checkpoint");
    TS_CHECK(record->shape == slot->sizes() && record->dtype == slot->dtype(), ValueError, what, ": buffer '", name,
             "' is ", dtype_name(record->dtype), " ", shape_str(record->shape), " in the checkpoint but ",
             slot->str(), " in the model");
    prepared.buffers.push_back(source.buffer(name));
  }
  for (const BufferRecord& record : manifest.buffers) {
    TS_CHECK(model_buffers.count(record.name), ValueError, what, ": the checkpoint's buffer '", record.name,
             "' is not a buffer of the model");
  }
  return prepared;
}

// Installs what was read. The optimizer and scheduler validate before changing anything,
// so they go first; copying tensors cannot fail on a mismatch after prepare().
void commit(Prepared& prepared, const ModelView& view, const Stateful& with) {
  StateDict optimizer_before;
  if (with.optimizer != nullptr) {
    optimizer_before = with.optimizer->state_dict();
    with.optimizer->load_state_dict(prepared.optimizer_state);
  }
  if (with.scheduler != nullptr) {
    try {
      with.scheduler->load_state_dict(prepared.scheduler_state);
    } catch (...) {
      if (with.optimizer != nullptr) with.optimizer->load_state_dict(optimizer_before);
      throw;
    }
  }
  NoGradGuard no_grad;
  // Gathered buffers are about to hold stale values: release them first (NO_SHARD's buffer
  // is the shard); with CPU offload this also waits until the device has read the shards.
  fsdp::reshard(*view.model);
  for (size_t k = 0; k < view.units.size(); ++k) {
    Tensor shard = view.units[k].info.shard.detach();
    native::copy_(shard, prepared.shards[k]);
  }
  for (size_t b = 0; b < view.buffers.size(); ++b) {
    Tensor buffer = view.buffers[b].second->detach();
    native::copy_(buffer, prepared.buffers[b]);
  }
}

}  // namespace

TrainingState load_into_model(const std::string& what, const std::function<std::unique_ptr<FlatSource>()>& open,
                              nn::Module& model, const Stateful& with) {
  ModelView view = ModelView::of(model, with.optimizer);
  std::unique_ptr<FlatSource> source;
  Prepared prepared;
  std::vector<std::string> fingerprints = run_on_every_rank(*view.group, what, [&] {
    source = open();
    prepared = prepare(*source, view, with, what);
    return std::to_string(prepared.fingerprint);
  });
  for (size_t rank = 1; rank < fingerprints.size(); ++rank) {
    if (fingerprints[rank] != fingerprints[0]) {
      throw CheckpointError(tessera::detail::concat(what, ": the ranks read different checkpoints (rank 0's manifest has CRC32C ",
                                                    fingerprints[0], ", rank ", rank, "'s ", fingerprints[rank],
                                                    "); is the directory shared by all ranks, and unchanged?"));
    }
  }
  commit(prepared, view, with);
  return source->manifest().training;
}

}  // namespace tessera::checkpoint::detail
