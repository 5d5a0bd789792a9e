// The manifest: built from a live model, written as JSON, and read back with every field
// validated (a checkpoint may be corrupt or hostile; nothing from it is trusted).
#include "tessera/checkpoint/manifest_reader.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "tessera/checkpoint/model_view.h"
#include "tessera/io/crc32c.h"
#include "tessera/io/safetensors.h"
#include "tessera/tensor/factory.h"

namespace tessera::checkpoint {

namespace json = io::json;
using detail::JsonReader;

namespace {

// Counts above this are refused on reading: far beyond any real model, and small enough
// that sums and byte counts of a few of them cannot overflow int64.
constexpr int64_t kMaxElements = int64_t{1} << 50;

json::Value double_json(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

json::Value shape_json(const Shape& shape) {
  json::Array sizes;
  for (int64_t size : shape) sizes.emplace_back(size);
  return sizes;
}

Shape shape_from(const json::Value& value, const JsonReader& reader, std::string_view what, int64_t* numel) {
  Shape shape;
  // The product of the non-zero sizes is bounded too, even when a zero makes the count 0:
  // strides multiply them.
  int64_t nonzero_product = 1;
  bool has_zero = false;
  for (const json::Value& size : reader.array(value, what)) {
    int64_t extent = reader.integer(size, what, 0, kMaxElements);
    if (extent == 0) {
      has_zero = true;
    } else if (__builtin_mul_overflow(nonzero_product, extent, &nonzero_product) || nonzero_product > kMaxElements) {
      reader.fail(value, what, ": more than ", kMaxElements, " elements");
    }
    shape.push_back(extent);
    if (shape.size() > 16) reader.fail(value, what, ": more than 16 dimensions");
  }
  if (numel != nullptr) *numel = has_zero ? 0 : nonzero_product;
  return shape;
}

DType dtype_from(const json::Value& value, const JsonReader& reader, std::string_view what, bool floating_only) {
  const std::string& name = reader.string(value, what);
  std::optional<DType> dtype = io::dtype_from_safetensors(name);
  if (!dtype) reader.fail(value, what, ": unknown dtype \"", name, "\" (Tessera reads F32, F64, I64, U8 and BF16)");
  if (floating_only && !is_floating(*dtype)) reader.fail(value, what, ": dtype ", name, " is not floating");
  return *dtype;
}

double double_from(const json::Value& value, const JsonReader& reader, std::string_view what) {
  if (value.is_string()) {
    const std::string& text = value.as_string();
    if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (text == "inf") return std::numeric_limits<double>::infinity();
    if (text == "-inf") return -std::numeric_limits<double>::infinity();
  }
  if (!value.is_number()) reader.fail(value, what, ": expected a number, found ", json::kind_name(value.kind()));
  return value.as_double();
}

const std::string& name_from(const json::Value& value, const JsonReader& reader, std::string_view what) {
  const std::string& name = reader.string(value, what);
  if (name.empty()) reader.fail(value, what, ": empty name");
  if (name.size() > 4096) reader.fail(value, what, ": a name of ", name.size(), " bytes");
  return name;
}

// A tensor of any small shape, in the general form.
json::Value general_tensor_json(const Tensor& tensor) {
  json::Array values;
  Tensor flat = tensor.detach().contiguous().view({-1});
  if (is_floating(tensor.dtype())) {
    for (double v : flat.to(DType::f64).to_vector<double>()) values.push_back(double_json(v));
  } else {
    for (int64_t v : flat.to(DType::i64).to_vector<int64_t>()) values.emplace_back(v);
  }
  return json::Object{{"dtype", std::string(io::safetensors_dtype_name(tensor.dtype()))},
                      {"shape", shape_json(tensor.sizes())},
                      {"values", std::move(values)}};
}

Tensor general_tensor_from(const json::Value& value, const JsonReader& reader, std::string_view what) {
  DType dtype = dtype_from(reader.member(value, "dtype", what), reader, what, false);
  int64_t numel = 0;
  Shape shape = shape_from(reader.member(value, "shape", what), reader, what, &numel);
  const json::Value& values = reader.member(value, "values", what);
  const json::Array& list = reader.array(values, what);
  if (static_cast<int64_t>(list.size()) != numel) {
    reader.fail(values, what, ": ", list.size(), " values for shape ", shape_str(shape));
  }
  if (is_floating(dtype)) {
    std::vector<double> numbers;
    for (const json::Value& v : list) numbers.push_back(double_from(v, reader, what));
    return tensor<double>(numbers, shape).to(dtype);
  }
  std::vector<int64_t> numbers;
  for (const json::Value& v : list) numbers.push_back(reader.integer(v, what, std::numeric_limits<int64_t>::min()));
  return tensor<int64_t>(numbers, shape).to(dtype);
}

// An optimizer parameter's scalar state ("step"): one value each, no name of a tensor.
StateDict scalars_from_json(const json::Value& value, const JsonReader& reader, const std::string& what,
                            const std::set<std::string>& tensor_names) {
  StateDict scalars = small_tensors_from_json(value, reader, what);
  for (const auto& [name, scalar] : scalars) {
    if (scalar.numel() != 1 || tensor_names.count(name)) {
      reader.fail(value, what, ": optimizer scalar \"", name, "\" is not one value or repeats a tensor");
    }
  }
  return scalars;
}

// Checks the optimizer's groups and state against the units: every parameter an original
// parameter or a flat shard of the model, in one group only, never a flat shard together
// with one of its own parameters; state only for grouped parameters, its tensors stored
// in their unit.
void check_optimizer(const Manifest& manifest, const json::Value& at, const JsonReader& reader) {
  std::map<std::string, size_t> unit_of;  // parameter or flat shard name -> unit
  std::set<std::string> flat_names;
  for (size_t u = 0; u < manifest.units.size(); ++u) {
    unit_of[manifest.units[u].flat_parameter] = u;
    flat_names.insert(manifest.units[u].flat_parameter);
    for (const fsdp::FlatEntry& entry : manifest.units[u].parameters) unit_of[entry.name] = u;
  }
  std::set<std::string> grouped;
  std::set<size_t> units_whole, units_by_parameter;
  for (const OptimizerGroupRecord& group : manifest.optimizer_groups) {
    for (const std::string& name : group.params) {
      auto found = unit_of.find(name);
      if (found == unit_of.end()) reader.fail(at, "optimizer: parameter '", name, "' is not in any unit");
      if (!grouped.insert(name).second) reader.fail(at, "optimizer: parameter '", name, "' is in two groups");
      (flat_names.count(name) ? units_whole : units_by_parameter).insert(found->second);
    }
  }
  for (size_t u : units_whole) {
    if (units_by_parameter.count(u)) {
      reader.fail(at, "optimizer: unit '", manifest.units[u].name, "' is stepped both as the flat shard '",
                  manifest.units[u].flat_parameter, "' and by its parameters");
    }
  }
  std::set<std::string> with_state;
  for (const OptimizerStateRecord& record : manifest.optimizer_state) {
    if (!grouped.count(record.param)) reader.fail(at, "optimizer: state for '", record.param, "', which is in no group");
    if (!with_state.insert(record.param).second) reader.fail(at, "optimizer: state for '", record.param, "' twice");
    const std::vector<std::string>& stored = manifest.units[unit_of.at(record.param)].state_tensors;
    for (const std::string& name : record.tensors) {
      if (std::find(stored.begin(), stored.end(), name) == stored.end()) {
        reader.fail(at, "optimizer: state '", name, "' of '", record.param, "' is not stored in unit '",
                    manifest.units[unit_of.at(record.param)].name, "'");
      }
    }
  }
}

void optimizer_from_json(const json::Value& optimizer, const JsonReader& reader, Manifest& manifest) {
  for (const json::Value& group_json : reader.array(reader.member(optimizer, "param_groups", "optimizer"), "param_groups")) {
    OptimizerGroupRecord group;
    group.hyperparameters = small_tensors_from_json(reader.member(group_json, "hyperparameters", "parameter group"),
                                                    reader, "optimizer hyperparameter");
    for (const json::Value& name : reader.array(reader.member(group_json, "params", "parameter group"), "params")) {
      group.params.push_back(name_from(name, reader, "optimizer parameter"));
    }
    manifest.optimizer_groups.push_back(std::move(group));
  }
  for (const json::Value& record_json : reader.array(reader.member(optimizer, "state", "optimizer"), "optimizer state")) {
    OptimizerStateRecord record;
    record.param = name_from(reader.member(record_json, "param", "optimizer state"), reader, "optimizer state param");
    const std::string where = "optimizer state of '" + record.param + "'";
    std::set<std::string> names;
    for (const json::Value& name_json : reader.array(reader.member(record_json, "tensors", where), where)) {
      const std::string& name = name_from(name_json, reader, where);
      if (!names.insert(name).second) reader.fail(name_json, where, ": \"", name, "\" is repeated");
      record.tensors.push_back(name);
    }
    record.scalars = scalars_from_json(reader.member(record_json, "scalars", where), reader, where, names);
    manifest.optimizer_state.push_back(std::move(record));
  }
  check_optimizer(manifest, optimizer, reader);
}

// Version 1 held one group (its hyper-parameters) over every unit's flat shard, and each
// unit's scalars.
void optimizer_from_v1(const json::Value& optimizer, const JsonReader& reader,
                       const std::vector<StateDict>& unit_scalars, Manifest& manifest) {
  OptimizerGroupRecord group;
  group.hyperparameters = small_tensors_from_json(reader.member(optimizer, "hyperparameters", "optimizer"), reader,
                                                  "optimizer hyperparameter");
  for (size_t u = 0; u < manifest.units.size(); ++u) {
    const UnitRecord& unit = manifest.units[u];
    group.params.push_back(unit.flat_parameter);
    if (unit.state_tensors.empty() && unit_scalars[u].empty()) continue;
    manifest.optimizer_state.push_back({unit.flat_parameter, unit.state_tensors, unit_scalars[u]});
  }
  manifest.optimizer_groups.push_back(std::move(group));
  check_optimizer(manifest, optimizer, reader);
}

// Version 1's StepLR state ("base_lr", "last_lr": one group) in today's keys.
StateDict step_lr_state_from_v1(const StateDict& old) {
  StateDict state;
  for (const auto& [key, value] : old) {
    if (key == "base_lr") {
      state.insert("base_lrs", tensor<double>({value.item<double>()}));
    } else if (key == "last_lr") {
      state.insert("_last_lr", tensor<double>({value.item<double>()}));
    } else {
      state.insert(key, value);
    }
  }
  if (state.contains("last_epoch")) {  // one step per epoch, the initial one included
    Tensor count = full({}, 0.0, {.dtype = DType::i64});
    count.data_ptr<int64_t>()[0] = state.at("last_epoch").to(DType::i64).item<int64_t>() + 1;
    state.insert("_step_count", count);
  }
  return state;
}

}  // namespace

const UnitRecord* Manifest::find_unit(const std::string& name) const {
  for (const UnitRecord& unit : units) {
    if (unit.name == name) return &unit;
  }
  return nullptr;
}

int64_t Manifest::parameter_numel() const {
  int64_t total = 0;
  for (const UnitRecord& unit : units) {
    for (const fsdp::FlatEntry& entry : unit.parameters) total += entry.numel;
  }
  return total;
}

const OptimizerStateRecord* Manifest::find_optimizer_state(const std::string& param) const {
  for (const OptimizerStateRecord& record : optimizer_state) {
    if (record.param == param) return &record;
  }
  return nullptr;
}

std::vector<std::string> Manifest::state_tensors_of(const UnitRecord& unit, const fsdp::FlatEntry& entry) const {
  if (const OptimizerStateRecord* own = find_optimizer_state(entry.name)) return own->tensors;
  if (const OptimizerStateRecord* flat = find_optimizer_state(unit.flat_parameter)) return flat->tensors;
  return {};
}

json::Value small_tensors_to_json(const StateDict& tensors) {
  json::Object out;
  for (const auto& [name, tensor] : tensors) {
    if (tensor.dim() == 0 && tensor.dtype() == DType::f64) {
      out.emplace_back(name, double_json(tensor.item<double>()));
    } else if (tensor.dim() == 0 && tensor.dtype() == DType::i64) {
      out.emplace_back(name, tensor.item<int64_t>());
    } else if (tensor.dim() == 1 && tensor.dtype() == DType::f64) {
      json::Array values;
      for (double v : tensor.detach().contiguous().to_vector<double>()) values.push_back(double_json(v));
      out.emplace_back(name, std::move(values));
    } else {
      out.emplace_back(name, general_tensor_json(tensor));
    }
  }
  return out;
}

StateDict small_tensors_from_json(const json::Value& value, const JsonReader& reader, std::string_view what) {
  StateDict out;
  for (const auto& [name, entry] : reader.object(value, what)) {
    std::string where = tessera::detail::concat(what, " \"", name, "\"");
    if (entry.is_int()) {
      out.insert(name, full({}, 0.0, {.dtype = DType::i64}));
      out.at(name).data_ptr<int64_t>()[0] = entry.as_int();  // exact beyond 2^53
    } else if (entry.is_number() || entry.is_string()) {
      out.insert(name, full({}, double_from(entry, reader, where), {.dtype = DType::f64}));
    } else if (entry.is_array()) {
      std::vector<double> numbers;
      for (const json::Value& v : entry.as_array()) numbers.push_back(double_from(v, reader, where));
      if (numbers.size() > 1'000'000) reader.fail(entry, where, ": too many values");
      out.insert(name, tensor<double>(numbers, {static_cast<int64_t>(numbers.size())}));
    } else {
      out.insert(name, general_tensor_from(entry, reader, where));
    }
  }
  return out;
}

json::Value training_state_to_json(const TrainingState& state) {
  TS_CHECK(state.extra.is_object(), ValueError, "checkpoint: TrainingState::extra must be a JSON object, it is ",
           json::kind_name(state.extra.kind()));
  json::Object generators;
  for (const auto& [name, generator] : state.generators) {
    generators.emplace_back(name, json::Object{{"seed", detail::unsigned64_json(generator.seed)},
                                               {"stream", detail::unsigned64_json(generator.stream)},
                                               {"offset", detail::unsigned64_json(generator.offset)}});
  }
  return json::Object{{"step", detail::unsigned64_json(state.step)},
                      {"epoch", state.epoch},
                      {"batch", state.batch},
                      {"seed", detail::unsigned64_json(state.seed)},
                      {"generators", std::move(generators)},
                      {"extra", state.extra}};
}

TrainingState training_state_from_json(const json::Value& value, const JsonReader& reader) {
  TrainingState state;
  const char* what = "training";
  state.step = reader.unsigned64(reader.member(value, "step", what), "training.step");
  state.epoch = reader.integer(reader.member(value, "epoch", what), "training.epoch", std::numeric_limits<int64_t>::min());
  state.batch = reader.integer(reader.member(value, "batch", what), "training.batch");
  state.seed = reader.unsigned64(reader.member(value, "seed", what), "training.seed");
  for (const auto& [name, generator] : reader.object(reader.member(value, "generators", what), "training.generators")) {
    std::string where = "training.generators." + name;
    state.generators[name] = {reader.unsigned64(reader.member(generator, "seed", where), where),
                              reader.unsigned64(reader.member(generator, "stream", where), where),
                              reader.unsigned64(reader.member(generator, "offset", where), where)};
  }
  state.extra = reader.member(value, "extra", what);
  reader.object(state.extra, "training.extra");
  return state;
}

Manifest describe(nn::Module& model, const Stateful& with, const TrainingState& training) {
  detail::ModelView view = detail::ModelView::of(model, with.optimizer);
  Manifest manifest;
  for (const detail::ModelUnit& unit : view.units) {
    UnitRecord record;
    record.name = unit.info.name;
    record.flat_parameter = unit.flat_parameter;
    record.dtype = unit.info.layout.dtype();
    record.flat_numel = unit.info.layout.flat_numel();
    record.parameters = unit.info.layout.entries();
    manifest.units.push_back(std::move(record));
  }
  for (const auto& [name, slot] : view.buffers) {
    TS_CHECK(slot->defined(), ValueError, "checkpoint: buffer '", name, "' is undefined");
    manifest.buffers.push_back({name, slot->dtype(), slot->sizes()});
  }
  if (with.optimizer != nullptr) {
    const optim::Optimizer& optimizer = *with.optimizer;
    manifest.optimizer = optimizer.type_name();
    const StateDict groups = optimizer.param_groups_state_dict();
    size_t first = 0;
    for (size_t g = 0; g < optimizer.param_group_count(); ++g) {
      OptimizerGroupRecord group;
      const std::string prefix = "param_groups." + std::to_string(g) + ".";
      for (const auto& [key, value] : groups) {
        if (key.rfind(prefix, 0) == 0 && key != prefix + "params") group.hyperparameters.insert(key.substr(prefix.size()), value);
      }
      const size_t count = optimizer.params(g).size();
      for (size_t i = first; i < first + count; ++i) group.params.push_back(view.optimizer_params[i].name);
      first += count;
      manifest.optimizer_groups.push_back(std::move(group));
    }
    for (size_t i = 0; i < view.optimizer_params.size(); ++i) {
      const detail::OptimizerParam& where = view.optimizer_params[i];
      if (optimizer.state(i).empty()) continue;
      OptimizerStateRecord record;
      record.param = where.name;
      for (const auto& [name, state] : optimizer.state(i)) {
        if (state.dim() == 0) {
          record.scalars.insert(name, state.detach().to(DType::f64).clone());
          continue;
        }
        TS_CHECK(state.dim() == 1 && state.numel() == where.numel, ValueError, "checkpoint: ", optimizer.type_name(),
                 " state '", name, "' of '", where.name, "' is ", state.str(), ", neither a scalar nor ", where.numel,
                 " elements (its part of the flat shard on this rank)");
        record.tensors.push_back(name);
        std::vector<std::string>& unit_tensors = manifest.units[where.unit].state_tensors;
        if (std::find(unit_tensors.begin(), unit_tensors.end(), name) == unit_tensors.end()) unit_tensors.push_back(name);
      }
      manifest.optimizer_state.push_back(std::move(record));
    }
  }
  if (with.scheduler != nullptr) {
    manifest.scheduler = with.scheduler->type_name();
    manifest.scheduler_state = with.scheduler->state_dict();
  }
  manifest.training = training;
  return manifest;
}

json::Value to_json(const Manifest& manifest) {
  json::Array units;
  for (const UnitRecord& unit : manifest.units) {
    json::Array parameters;
    for (const fsdp::FlatEntry& entry : unit.parameters) {
      parameters.push_back(json::Object{{"name", entry.name},
                                        {"shape", shape_json(entry.shape)},
                                        {"offset", entry.offset},
                                        {"numel", entry.numel}});
    }
    json::Array state_tensors;
    for (const std::string& name : unit.state_tensors) state_tensors.emplace_back(name);
    units.push_back(json::Object{{"name", unit.name},
                                 {"flat_parameter", unit.flat_parameter},
                                 {"dtype", std::string(io::safetensors_dtype_name(unit.dtype))},
                                 {"flat_numel", unit.flat_numel},
                                 {"parameters", std::move(parameters)},
                                 {"optimizer_state", json::Object{{"tensors", std::move(state_tensors)}}}});
  }
  json::Array buffers;
  for (const BufferRecord& buffer : manifest.buffers) {
    buffers.push_back(json::Object{{"name", buffer.name},
                                   {"dtype", std::string(io::safetensors_dtype_name(buffer.dtype))},
                                   {"shape", shape_json(buffer.shape)}});
  }
  json::Value optimizer = nullptr;
  if (!manifest.optimizer.empty()) {
    json::Array groups;
    for (const OptimizerGroupRecord& group : manifest.optimizer_groups) {
      json::Array params;
      for (const std::string& name : group.params) params.emplace_back(name);
      groups.push_back(json::Object{{"hyperparameters", small_tensors_to_json(group.hyperparameters)},
                                    {"params", std::move(params)}});
    }
    json::Array states;
    for (const OptimizerStateRecord& record : manifest.optimizer_state) {
      json::Array tensors;
      for (const std::string& name : record.tensors) tensors.emplace_back(name);
      states.push_back(json::Object{{"param", record.param},
                                    {"tensors", std::move(tensors)},
                                    {"scalars", small_tensors_to_json(record.scalars)}});
    }
    optimizer = json::Object{{"type", manifest.optimizer}, {"param_groups", std::move(groups)}, {"state", std::move(states)}};
  }
  json::Value scheduler = nullptr;
  if (!manifest.scheduler.empty()) {
    scheduler = json::Object{{"type", manifest.scheduler}, {"state", small_tensors_to_json(manifest.scheduler_state)}};
  }
  json::Object object{{"units", std::move(units)},
                      {"buffers", std::move(buffers)},
                      {"optimizer", std::move(optimizer)},
                      {"scheduler", std::move(scheduler)},
                      {"training", training_state_to_json(manifest.training)}};
  if (manifest.finite) object.emplace_back("finite", *manifest.finite);
  return object;
}

namespace {

// Unit `where`'s parameter table: each name new to the checkpoint, shape and numel agreeing,
// offsets in order without overlap, the last ending at the unit's flat_numel.
std::vector<fsdp::FlatEntry> flat_entries_from_json(const json::Value& unit_json, const JsonReader& reader,
                                                    const std::string& where, int64_t flat_numel,
                                                    const json::Value& flat_numel_json,
                                                    std::set<std::string>& tensor_names) {
  std::vector<fsdp::FlatEntry> entries;
  int64_t previous_end = 0;
  for (const json::Value& entry_json : reader.array(reader.member(unit_json, "parameters", where), where)) {
    fsdp::FlatEntry entry;
    entry.name = name_from(reader.member(entry_json, "name", where), reader, where + " parameter name");
    const std::string in = where + " parameter '" + entry.name + "'";
    if (!tensor_names.insert(entry.name).second) reader.fail(entry_json, in, ": named twice in the checkpoint");
    int64_t numel = 0;
    entry.shape = shape_from(reader.member(entry_json, "shape", in), reader, in + " shape", &numel);
    const json::Value& offset_json = reader.member(entry_json, "offset", in);
    entry.offset = reader.integer(offset_json, in + " offset", 0, kMaxElements);
    const json::Value& numel_json = reader.member(entry_json, "numel", in);
    entry.numel = reader.integer(numel_json, in + " numel", 0, kMaxElements);
    if (entry.numel != numel) {
      reader.fail(numel_json, in, ": numel ", entry.numel, " but shape ", shape_str(entry.shape), " has ", numel,
                  " elements");
    }
    if (entry.offset < previous_end) {
      reader.fail(offset_json, in, ": offset ", entry.offset, " overlaps the previous parameter, which ends at ",
                  previous_end);
    }
    if (entry.offset + entry.numel > flat_numel) {
      reader.fail(offset_json, in, ": elements [", entry.offset, ", ", entry.offset + entry.numel,
                  ") run past the unit's flat_numel ", flat_numel);
    }
    previous_end = entry.offset + entry.numel;
    entries.push_back(std::move(entry));
  }
  if (previous_end != flat_numel) {
    reader.fail(flat_numel_json, where, ": flat_numel ", flat_numel, " but the last parameter ends at ",
                previous_end);
  }
  return entries;
}

// The names a checkpoint may hold only once.
struct NamesSeen {
  std::set<std::string> units, flat_parameters, tensors;  // tensors: parameters and buffers
};

// One unit's record; version 1 files also give the optimizer's scalars per unit (legacy_scalars).
UnitRecord unit_from_json(const json::Value& unit_json, const JsonReader& reader, int64_t version, NamesSeen& seen,
                          std::vector<StateDict>& legacy_scalars) {
  UnitRecord unit;
  unit.name = name_from(reader.member(unit_json, "name", "unit"), reader, "unit name");
  const std::string where = "unit '" + unit.name + "'";
  if (!seen.units.insert(unit.name).second) reader.fail(unit_json, where, ": named twice");
  const json::Value& flat_json = reader.member(unit_json, "flat_parameter", where);
  unit.flat_parameter = name_from(flat_json, reader, where + " flat_parameter");
  if (!seen.flat_parameters.insert(unit.flat_parameter).second) {
    reader.fail(flat_json, where, ": flat parameter '", unit.flat_parameter, "' appears twice");
  }
  unit.dtype = dtype_from(reader.member(unit_json, "dtype", where), reader, where + " dtype", true);
  const json::Value& flat_numel_json = reader.member(unit_json, "flat_numel", where);
  unit.flat_numel = reader.integer(flat_numel_json, where + " flat_numel", 0, kMaxElements);

  unit.parameters = flat_entries_from_json(unit_json, reader, where, unit.flat_numel, flat_numel_json, seen.tensors);

  const json::Value& state_json = reader.member(unit_json, "optimizer_state", where);
  std::set<std::string> state_names;
  for (const json::Value& name_json : reader.array(reader.member(state_json, "tensors", where), where)) {
    const std::string& name = name_from(name_json, reader, where + " optimizer state");
    if (name.find('/') != std::string::npos || !state_names.insert(name).second) {
      reader.fail(name_json, where, ": optimizer state name \"", name, "\" is repeated or has a '/'");
    }
    unit.state_tensors.push_back(name);
  }
  if (version == 1) {
    const json::Value& scalars_json = reader.member(state_json, "scalars", where);
    legacy_scalars.push_back(scalars_from_json(scalars_json, reader, where + " optimizer scalars", state_names));
  }
  return unit;
}

std::pair<std::string, StateDict> scheduler_from_json(const json::Value& scheduler, const JsonReader& reader,
                                                      int64_t version) {
  std::string type = name_from(reader.member(scheduler, "type", "scheduler"), reader, "scheduler type");
  const std::set<std::string> known{"StepLR", "LinearLR", "CosineAnnealingLR", "LambdaLR", "SequentialLR"};
  if (!known.count(type) || (version == 1 && type != "StepLR")) {
    reader.fail(scheduler, "scheduler: unknown type \"", type,
                "\" (this version knows StepLR, LinearLR, CosineAnnealingLR, LambdaLR and SequentialLR)");
  }
  StateDict state = small_tensors_from_json(reader.member(scheduler, "state", "scheduler"), reader, "scheduler");
  if (version == 1) state = step_lr_state_from_v1(state);
  return {std::move(type), std::move(state)};
}

}  // namespace

Manifest manifest_from_json(const json::Value& value, const JsonReader& reader, int64_t version) {
  Manifest manifest;
  std::vector<StateDict> legacy_scalars;  // version 1: the optimizer's scalars per unit
  NamesSeen seen;
  for (const json::Value& unit_json : reader.array(reader.member(value, "units", "manifest"), "units")) {
    manifest.units.push_back(unit_from_json(unit_json, reader, version, seen, legacy_scalars));
  }

  for (const json::Value& buffer_json : reader.array(reader.member(value, "buffers", "manifest"), "buffers")) {
    BufferRecord buffer;
    buffer.name = name_from(reader.member(buffer_json, "name", "buffer"), reader, "buffer name");
    const std::string where = "buffer '" + buffer.name + "'";
    if (!seen.tensors.insert(buffer.name).second) reader.fail(buffer_json, where, ": named twice in the checkpoint");
    buffer.dtype = dtype_from(reader.member(buffer_json, "dtype", where), reader, where + " dtype", false);
    buffer.shape = shape_from(reader.member(buffer_json, "shape", where), reader, where + " shape", nullptr);
    manifest.buffers.push_back(std::move(buffer));
  }

  const json::Value& optimizer = reader.member(value, "optimizer", "manifest");
  if (!optimizer.is_null()) {
    manifest.optimizer = name_from(reader.member(optimizer, "type", "optimizer"), reader, "optimizer type");
    if (version == 1) {
      optimizer_from_v1(optimizer, reader, legacy_scalars, manifest);
    } else {
      optimizer_from_json(optimizer, reader, manifest);
    }
  }
  const json::Value& scheduler = reader.member(value, "scheduler", "manifest");
  if (!scheduler.is_null()) {
    std::tie(manifest.scheduler, manifest.scheduler_state) = scheduler_from_json(scheduler, reader, version);
  }
  manifest.training = training_state_from_json(reader.member(value, "training", "manifest"), reader);
  if (const json::Value* finite = value.find("finite")) {
    if (!finite->is_bool()) reader.fail(*finite, "finite: expected true or false");
    manifest.finite = finite->as_bool();
  }
  return manifest;
}

std::string write_with_crc(json::Value value) {
  TS_CHECK(value.is_object(), ValueError, "write_with_crc: expected an object");
  std::string text = json::write(value);
  uint32_t crc = io::crc32c(text.data(), text.size());
  value.set("metadata_crc32c", static_cast<int64_t>(crc));
  return json::write(value);
}

json::Value check_and_strip_crc(json::Value value, const JsonReader& reader) {
  reader.object(value, "metadata");
  json::Object& members = value.as_object();
  if (members.empty() || members.back().first != "metadata_crc32c") {
    reader.fail(value, "the metadata does not end with \"metadata_crc32c\" (truncated, or not written by Tessera)");
  }
  const json::Value recorded = std::move(members.back().second);
  int64_t expected = reader.integer(recorded, "metadata_crc32c", 0, 0xFFFFFFFFll);
  members.pop_back();  // in place: a large metadata document is not copied
  std::string text = json::write(value);
  uint32_t computed = io::crc32c(text.data(), text.size());
  if (computed != static_cast<uint32_t>(expected)) {
    reader.fail(recorded, "metadata CRC32C mismatch: computed ", computed, " over the metadata, recorded ", expected,
                " (the metadata is corrupt or was edited)");
  }
  return value;
}

}  // namespace tessera::checkpoint
