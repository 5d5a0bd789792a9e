// Where each parameter of an FSDP unit lives in the unit's flat vector, and which part of
// that vector each rank holds.
//
// The flat vector is the unit's parameters concatenated in registration order, each
// starting at a 16-byte boundary; the gaps are zero. That unpadded vector depends only on
// the parameters, never on the world size, so resharding a checkpoint is re-slicing it.
// For sharding it is right-padded with zeros to a multiple of the world size W, and rank r
// holds elements [r * S, (r + 1) * S) with S = padded / W.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/tensor/dtype.h"
#include "tessera/tensor/shape.h"

namespace tessera::fsdp {

struct FlatEntry {
  std::string name;  // full dotted name, as in the unsharded state dict
  Shape shape;
  int64_t numel = 0;
  int64_t offset = 0;  // first element in the flat vector
};

// A half-open element range [begin, end).
struct ElementRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end > begin ? end - begin : 0; }
  bool empty() const { return size() == 0; }
};

class FlatLayout {
 public:
  FlatLayout() = default;
  // Lays out `entries` (name and shape filled in) for `dtype`, sharded over `world_size`.
  FlatLayout(std::vector<FlatEntry> entries, DType dtype, int world_size);

  const std::vector<FlatEntry>& entries() const { return entries_; }
  DType dtype() const { return dtype_; }
  int world_size() const { return world_size_; }
  // Elements of the unpadded flat vector (up to the end of the last parameter).
  int64_t flat_numel() const { return flat_numel_; }
  // flat_numel rounded up to a multiple of the world size.
  int64_t padded_numel() const { return padded_numel_; }
  int64_t shard_numel() const { return padded_numel_ / world_size_; }
  ElementRange shard_range(int rank) const;
  // The part of parameter `index` that falls in `range`, in flat coordinates.
  ElementRange overlap(size_t index, const ElementRange& range) const;

 private:
  std::vector<FlatEntry> entries_;
  DType dtype_ = DType::f32;
  int world_size_ = 1;
  int64_t flat_numel_ = 0;
  int64_t padded_numel_ = 0;
};

// The first element offset >= `offset` that starts at a 16-byte boundary for `dtype`.
int64_t align_offset(int64_t offset, DType dtype);

}  // namespace tessera::fsdp
