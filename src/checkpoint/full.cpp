// Full checkpoints: unflattening flat tensors into per-parameter tensors with PyTorch's
// names on writing, and reading any flat range back from them.
#include "tessera/checkpoint/full.h"

#include <algorithm>
#include <optional>

#include "tessera/checkpoint/chunks.h"
#include "tessera/checkpoint/collective.h"
#include "tessera/checkpoint/load_into.h"
#include "tessera/checkpoint/manifest_reader.h"
#include "tessera/checkpoint/model_source.h"
#include "tessera/dist/new_group.h"
#include "tessera/tensor/native.h"

namespace tessera::checkpoint {

namespace json = io::json;
using detail::JsonReader;

namespace {

// Every stored tensor of a full checkpoint of `manifest`: name -> (dtype, shape).
std::vector<std::pair<std::string, std::pair<DType, Shape>>> stored_tensors(const Manifest& manifest) {
  std::vector<std::pair<std::string, std::pair<DType, Shape>>> out;
  for (const UnitRecord& unit : manifest.units) {
    for (const fsdp::FlatEntry& entry : unit.parameters) out.push_back({entry.name, {unit.dtype, entry.shape}});
  }
  for (const BufferRecord& buffer : manifest.buffers) out.push_back({buffer.name, {buffer.dtype, buffer.shape}});
  for (const UnitRecord& unit : manifest.units) {
    for (const fsdp::FlatEntry& entry : unit.parameters) {
      for (const std::string& state : manifest.state_tensors_of(unit, entry)) {
        out.push_back({full_tensor_name(entry.name, state), {unit.dtype, entry.shape}});
      }
    }
  }
  return out;
}

// The model gathered unit by unit, kept on rank 0 only (every rank takes part).
class GatheredSource final : public FlatSource {
 public:
  GatheredSource(const detail::ModelView& view, const detail::ModelSource& shards) : manifest_(shards.manifest()) {
    dist::ProcessGroup& group = *view.group;
    for (size_t u = 0; u < view.units.size(); ++u) {
      const UnitRecord& unit = manifest_.units[u];
      std::vector<std::string> states{""};
      states.insert(states.end(), unit.state_tensors.begin(), unit.state_tensors.end());
      for (const std::string& state : states) {
        Tensor shard = native::contiguous(shards.shard(u, state));
        // An NCCL group carries CUDA tensors only; CPU offload's shards are on the host.
        if (group.backend() == dist::Backend::nccl && !shard.is_cuda()) {
          shard = native::to_device(shard, Device::cuda(dist::nccl_device(group)));
        }
        Tensor whole;
        if (view.units[u].replicated || group.size() == 1) {
          whole = shard;
        } else {
          whole = native::empty({shard.numel() * group.size()}, shard.dtype(), shard.device());
          group.all_gather_into(whole, shard);
        }
        if (group.rank() != 0) continue;
        whole = native::narrow(whole, 0, 0, unit.flat_numel);
        if (whole.is_cuda()) whole = native::to_device(whole, Device::cpu());
        flat_[sharded_tensor_name(unit, state)] = native::contiguous(whole);
      }
    }
    if (group.rank() == 0) {
      for (const BufferRecord& buffer : manifest_.buffers) buffers_[buffer.name] = shards.buffer(buffer.name);
    }
  }

  const Manifest& manifest() const override { return manifest_; }
  Tensor slice(size_t unit, const std::string& state, int64_t first, int64_t count) const override {
    return native::narrow(flat_.at(sharded_tensor_name(manifest_.units.at(unit), state)), 0, first, count);
  }
  void read(size_t unit, const std::string& state, int64_t first, const Tensor& destination) const override {
    Tensor target = destination;
    native::copy_(target, slice(unit, state, first, destination.numel()));
  }
  Tensor buffer(const std::string& name) const override { return buffers_.at(name); }

 private:
  Manifest manifest_;
  std::unordered_map<std::string, Tensor> flat_;
  std::unordered_map<std::string, Tensor> buffers_;
};

// The model's tensors of `source` under PyTorch's names: its parameters, unflattened from
// the flat vectors, then its buffers (the full state dict, in the model's order).
StateDict model_tensors(const FlatSource& source) {
  const Manifest& manifest = source.manifest();
  StateDict tensors;
  for (size_t u = 0; u < manifest.units.size(); ++u) {
    const UnitRecord& unit = manifest.units[u];
    Tensor values = source.slice(u, "", 0, unit.flat_numel);
    for (const fsdp::FlatEntry& entry : unit.parameters) {
      tensors.insert(entry.name, native::view(native::narrow(values, 0, entry.offset, entry.numel), entry.shape));
    }
  }
  for (const BufferRecord& buffer : manifest.buffers) tensors.insert(buffer.name, source.buffer(buffer.name));
  return tensors;
}

}  // namespace

void write_full(const FlatSource& source, const std::string& path) {
  const Manifest& manifest = source.manifest();
  StateDict tensors;
  json::Object crcs;
  auto add = [&](const std::string& name, const Tensor& tensor) {
    TS_CHECK(!tensors.contains(name), ValueError, "write_full('", path, "'): two tensors would be named '", name, "'");
    tensors.insert(name, tensor);
    json::Array list;
    for (uint32_t crc : chunk_crcs(tensor, kDefaultChunkBytes)) list.emplace_back(static_cast<int64_t>(crc));
    crcs.emplace_back(name, std::move(list));
  };
  // Parameters, then buffers, then optimizer state by parameter, unflattened from the flat vectors.
  for (const auto& [name, tensor] : model_tensors(source)) add(name, tensor);
  for (size_t u = 0; u < manifest.units.size(); ++u) {
    const UnitRecord& unit = manifest.units[u];
    std::vector<Tensor> states;
    for (const std::string& state : unit.state_tensors) states.push_back(source.slice(u, state, 0, unit.flat_numel));
    for (const fsdp::FlatEntry& entry : unit.parameters) {
      for (const std::string& state : manifest.state_tensors_of(unit, entry)) {
        const size_t s = static_cast<size_t>(std::find(unit.state_tensors.begin(), unit.state_tensors.end(), state) -
                                             unit.state_tensors.begin());
        add(full_tensor_name(entry.name, state),
            native::view(native::narrow(states.at(s), 0, entry.offset, entry.numel), entry.shape));
      }
    }
  }
  json::Value document = json::Object{{"format", kFullFormat},
                                      {"version", kFormatVersion},
                                      {"crc32c_chunk_bytes", static_cast<int64_t>(kDefaultChunkBytes)},
                                      {"manifest", to_json(manifest)},
                                      {"tensors", std::move(crcs)}};
  io::save(tensors, path, {{"format", kFullFormat}, {kManifestKey, write_with_crc(std::move(document))}});
}

void write_model_weights(const FlatSource& source, const std::string& path) {
  io::save(model_tensors(source), path, {{"format", "pt"}});
}

FullCheckpoint::FullCheckpoint(const std::string& path) : file_(path) {
  for (const auto& [key, value] : file_.metadata()) {
    if ((key == "format" && value == kFullFormat) || key == kManifestKey) continue;
    throw io::FormatError(tessera::detail::concat(path, ": byte 8: __metadata__ \"", key, "\": unexpected in a ",
                                                  kFullFormat, " (its \"format\" must be \"", kFullFormat, "\")"));
  }
  auto found = file_.metadata().find(kManifestKey);
  if (found == file_.metadata().end()) {
    throw io::FormatError(tessera::detail::concat(
        path, ": byte 8: no \"", kManifestKey, "\" in the header's __metadata__: not a Tessera full checkpoint ",
        "(plain weights load with model.load_state_dict(io::load(path)))"));
  }
  const std::string& text = found->second;
  JsonReader reader(path + " (its __metadata__ \"" + kManifestKey + "\" JSON)");
  json::Value parsed;
  try {
    parsed = json::parse(text, json::file_limits(text.size()));
  } catch (const json::ParseError& error) {
    throw io::FormatError(tessera::detail::concat(path, ": byte ", error.offset(), " of its __metadata__ \"",
                                                  kManifestKey, "\" JSON: invalid JSON: ", error.reason()));
  }
  json::Value value = check_and_strip_crc(std::move(parsed), reader);
  const json::Value& format = reader.member(value, "format", "manifest document");
  if (reader.string(format, "format") != kFullFormat) reader.fail(format, "format is not \"", kFullFormat, "\"");
  const int64_t version = reader.integer(reader.member(value, "version", "manifest document"),
                                         "version (this Tessera reads up to version 2)", 1, kFormatVersion);
  const json::Value& chunk_json = reader.member(value, "crc32c_chunk_bytes", "manifest document");
  chunk_bytes_ = static_cast<uint64_t>(reader.integer(chunk_json, "crc32c_chunk_bytes", 8, int64_t{1} << 30));
  if (chunk_bytes_ % 8 != 0) reader.fail(chunk_json, "crc32c_chunk_bytes must be a multiple of 8");
  manifest_ = manifest_from_json(reader.member(value, "manifest", "manifest document"), reader, version);
  const json::Value& crcs_json = reader.member(value, "tensors", "manifest document");
  for (const auto& [name, list] : reader.object(crcs_json, "tensors")) {
    std::vector<uint32_t>& crcs = crcs_[name];
    for (const json::Value& crc : reader.array(list, "tensor '" + name + "' crc32c")) {
      crcs.push_back(static_cast<uint32_t>(reader.integer(crc, "tensor '" + name + "' crc32c", 0, 0xFFFFFFFFll)));
    }
  }
  auto stored = stored_tensors(manifest_);
  for (const auto& [name, form] : stored) {
    auto crcs = crcs_.find(name);
    if (crcs == crcs_.end()) reader.fail(crcs_json, "tensors: no CRC32C for tensor '", name, "'");
    check_entry(file_, name, form.first, form.second, crcs->second, chunk_bytes_, path + " (its manifest)");
  }
  if (stored.size() != file_.entries().size() || stored.size() != crcs_.size()) {
    throw io::FormatError(tessera::detail::concat(path, ": byte 8: the header lists ", file_.entries().size(), " tensors and ",
                                                  crcs_.size(), " CRC lists, but its manifest describes ",
                                                  stored.size()));
  }
}

void FullCheckpoint::read(size_t unit, const std::string& state, int64_t first, const Tensor& destination) const {
  const UnitRecord& record = manifest_.units.at(unit);
  TS_CHECK(state.empty() || std::count(record.state_tensors.begin(), record.state_tensors.end(), state), ValueError,
           "checkpoint '", path(), "': unit '", record.name, "' has no optimizer state '", state, "'");
  const int64_t last = first + destination.numel();
  TS_CHECK(first >= 0 && last <= record.flat_numel, IndexError, "checkpoint '", path(), "': elements [", first, ", ",
           last, ") of unit '", record.name, "' leave its ", record.flat_numel);
  Tensor target = destination;
  native::fill_(target, 0.0);  // the gaps between parameters, and parameters without this state
  for (const fsdp::FlatEntry& entry : record.parameters) {
    const int64_t begin = std::max(first, entry.offset), end = std::min(last, entry.offset + entry.numel);
    if (end <= begin) continue;
    const std::string name = full_tensor_name(entry.name, state);
    if (!state.empty() && !crcs_.count(name)) continue;
    read_verified(file_, name, crcs_.at(name), chunk_bytes_, begin - entry.offset,
                  native::narrow(destination, 0, begin - first, end - begin));
  }
}

Tensor FullCheckpoint::tensor(const std::string& name) const {
  const io::TensorEntry& entry = file_.entry(name);
  Tensor out = native::empty({entry.numel()}, entry.dtype, Device::cpu());
  read_verified(file_, name, crcs_.at(name), chunk_bytes_, 0, out);
  return native::view(out, entry.shape);
}

Tensor FullCheckpoint::buffer(const std::string& name) const {
  for (const BufferRecord& record : manifest_.buffers) {
    if (record.name == name) return tensor(name);
  }
  throw ValueError(tessera::detail::concat("checkpoint '", path(), "' has no buffer '", name, "'"));
}

void FullCheckpoint::verify_all() const {
  for (const io::TensorEntry& entry : file_.entries()) (void)tensor(entry.name);
}

namespace {
void save_full_within_shard_group(const std::string& path, nn::Module& model, const Stateful& with,
                                  const TrainingState& training);
}  // namespace

void save_full(const std::string& path, nn::Module& model, const Stateful& with, const TrainingState& training) {
  const std::string what = "saving checkpoint '" + path + "'";
  detail::on_first_replica(model, what, [&] { save_full_within_shard_group(path, model, with, training); });
}

namespace {

void save_full_within_shard_group(const std::string& path, nn::Module& model, const Stateful& with,
                                  const TrainingState& training) {
  detail::ModelView view = detail::ModelView::of(model, with.optimizer);
  const std::string what = "saving checkpoint '" + path + "'";
  std::optional<detail::ModelSource> shards;
  detail::run_on_every_rank(*view.group, what, [&] {  // a bad value on any rank fails every rank
    shards.emplace(view, with, describe(model, with, training));
    (void)json::write(to_json(shards->manifest()));
    return std::string();
  });
  GatheredSource gathered(view, *shards);
  detail::run_on_every_rank(*view.group, what, [&] {
    if (view.group->rank() == 0) write_full(gathered, path);
    return std::string();
  });
}

}  // namespace

TrainingState load_full(const std::string& path, nn::Module& model, const Stateful& with) {
  return detail::load_into_model(
      "loading checkpoint '" + path + "'", [&] { return std::make_unique<FullCheckpoint>(path); }, model, with);
}

}  // namespace tessera::checkpoint
