// Full checkpoints: one safetensors file that PyTorch users can read directly.
//
//   "conv1.weight", "fc1.bias", ...            the model's parameters and buffers under
//                                              PyTorch's names (the full state dict)
//   "optimizer.state.fc1.weight.exp_avg", ...  per-element optimizer state, unflattened per
//                                              original parameter (its shape)
//   __metadata__ "format": "tessera.full-checkpoint"
//   __metadata__ "tessera.manifest": JSON: the manifest (units, optimizer type,
//                hyper-parameters and scalar state such as "step", scheduler, training
//                position), the CRC32C of every tensor's chunks, and its own CRC32C
//
// A full checkpoint loads at any world size (each rank reads only the parts of the
// parameters its shards cover) and converts to and from sharded checkpoints
// (tessera-checkpoint to-full / to-sharded); the conversions are exact, since the gaps
// between parameters in a flat vector are always zero.
//
//   ts::checkpoint::save_full("model.safetensors", model, {.optimizer = &adam}, state);  // collective
//   ts::checkpoint::load_full("model.safetensors", model, {.optimizer = &adam});
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/checkpoint/flat_source.h"
#include "tessera/io/safetensors.h"

namespace tessera::checkpoint {

inline constexpr const char* kFullFormat = "tessera.full-checkpoint";
inline constexpr const char* kManifestKey = "tessera.manifest";

// A full checkpoint opened for reading: the header and the manifest are validated, and
// every tensor is checked to be present with its dtype and shape (and nothing else).
class FullCheckpoint final : public FlatSource {
 public:
  explicit FullCheckpoint(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const io::SafetensorsFile& file() const { return file_; }
  const Manifest& manifest() const override { return manifest_; }
  uint64_t chunk_bytes() const { return chunk_bytes_; }
  void read(size_t unit, const std::string& state, int64_t first, const Tensor& destination) const override;
  Tensor buffer(const std::string& name) const override;
  // Tensor `name` of the file, whole, verified.
  Tensor tensor(const std::string& name) const;
  void verify_all() const;

 private:
  io::SafetensorsFile file_;
  Manifest manifest_;
  uint64_t chunk_bytes_ = 0;
  std::unordered_map<std::string, std::vector<uint32_t>> crcs_;
};

// Gathers `model` (sharded) and `with` and writes a full checkpoint on rank 0 (atomically:
// temporary file, fsync, rename). Collective; the other ranks hold one unit's buffer at a
// time. Errors on rank 0 fail the call on every rank.
void save_full(const std::string& path, nn::Module& model, const Stateful& with, const TrainingState& training);

// Loads a full checkpoint into `model` (sharded at any world size) and `with`. Collective;
// nothing is changed unless every rank succeeded.
TrainingState load_full(const std::string& path, nn::Module& model, const Stateful& with = {});

// Writes `source` as a full checkpoint, in this one process (tessera-checkpoint to-full).
void write_full(const FlatSource& source, const std::string& path);

// Writes the model's parameters and buffers of `source` alone, under PyTorch's names, as a
// plain safetensors file (__metadata__ {"format": "pt"}, as safetensors.torch.save_file
// writes; no optimizer state, no manifest): what PyTorch's strict
// model.load_state_dict(safetensors.torch.load_file(path)) and Tessera's
// model.load_state_dict(io::load(path)) read (tessera-checkpoint to-full --model-only).
void write_model_weights(const FlatSource& source, const std::string& path);

}  // namespace tessera::checkpoint
