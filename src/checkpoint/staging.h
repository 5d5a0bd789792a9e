// What one rank writes of a checkpoint, copied out of the live model into host memory
// (internal), so that an asynchronous save can write it from a background thread while
// training goes on changing the model: this rank's written range of every unit's flat
// parameter and per-element optimizer state, rank 0's buffers, and the manifest (the
// training position and the optimizer's scalars with it).
//
// The memory is pinned (page-locked: pinned_host_allocator(), a direct DMA from the GPU)
// when the shards are on a GPU, and the CPU allocator's when they are on the CPU, where it
// counts against the CPU's memory limit. It is kept between saves: the next save copies
// into the same buffers, so training never waits for an allocation or for fresh pages to
// be faulted in. Parameters are checked for finiteness on the copy while it is in cache.
//
//   StagedState staged;
//   std::optional<std::string> problem = staged.stage(source, rank);   // training waits for this
//   std::thread([&] { write_sharded_files(group, staged, ...); });      // ... not for this
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/checkpoint/model_source.h"

namespace tessera::checkpoint::detail {

class StagedState final : public FlatSource {
 public:
  // Copies what this rank writes of `source` (rank 0 also its buffers), replacing what was
  // staged before. Returns the first non-finite parameter or buffer element, described; nullopt when all
  // of it is finite. OutOfMemoryError past the memory limit (the staged copy is then empty).
  std::optional<std::string> stage(const ModelSource& source, int rank);

  const Manifest& manifest() const override { return manifest_; }
  void read(size_t unit, const std::string& state, int64_t first, const Tensor& destination) const override;
  // A view of the staged copy.
  Tensor slice(size_t unit, const std::string& state, int64_t first, int64_t count) const override;
  Tensor buffer(const std::string& name) const override;

  // The elements of unit `unit` staged (ModelSource::written at staging).
  fsdp::ElementRange written(size_t unit) const { return ranges_.at(unit); }
  // Host bytes the staged copy holds.
  int64_t bytes() const;
  // Whether it is in pinned memory (the shards are on a GPU).
  bool pinned() const;
  void record_finite(bool finite) { manifest_.finite = finite; }

 private:
  const Tensor& staged(size_t unit, const std::string& state) const;

  Manifest manifest_;
  std::vector<fsdp::ElementRange> ranges_;                      // by unit
  std::map<std::pair<size_t, std::string>, Tensor> slices_;     // (unit, state) -> its written range
  std::map<std::string, Tensor> buffers_;                       // rank 0: name -> the whole buffer
};

}  // namespace tessera::checkpoint::detail
