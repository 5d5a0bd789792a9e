// Where a checkpoint's flat tensors come from when one is written or loaded: a live model's
// shards, a sharded checkpoint directory or a full checkpoint file. A flat tensor is a
// unit's flat parameter or one of its optimizer state tensors ("exp_avg"), in the unpadded
// flat coordinates that do not depend on the world size, so any source can fill any range.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/checkpoint/manifest.h"
#include "tessera/tensor/tensor.h"

namespace tessera::checkpoint {

class FlatSource {
 public:
  virtual ~FlatSource() = default;
  virtual const Manifest& manifest() const = 0;

  // Elements [first, first + destination.numel()) of unit `unit`'s flat tensor `state`
  // ("" for the parameter, else an optimizer state tensor's name) into `destination`
  // (contiguous CPU, the unit's dtype). Gaps between parameters read as zero.
  virtual void read(size_t unit, const std::string& state, int64_t first, const Tensor& destination) const = 0;
  // Those elements as a 1-D CPU tensor (a view where the source holds them in memory).
  virtual Tensor slice(size_t unit, const std::string& state, int64_t first, int64_t count) const;
  // Buffer `name` of the manifest, whole.
  virtual Tensor buffer(const std::string& name) const = 0;
};

// The names flat tensors and buffers are stored under in sharded checkpoint files.
std::string sharded_tensor_name(const UnitRecord& unit, const std::string& state);
std::string sharded_buffer_name(const std::string& buffer);
// The names per-parameter tensors are stored under in full checkpoint files: the
// parameter's own name for "", else "optimizer.state.<parameter>.<state>".
std::string full_tensor_name(const std::string& parameter, const std::string& state);

}  // namespace tessera::checkpoint
