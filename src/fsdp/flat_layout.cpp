#include "tessera/fsdp/flat_layout.h"

#include <algorithm>

#include "tessera/tensor/error.h"

namespace tessera::fsdp {

int64_t align_offset(int64_t offset, DType dtype) {
  const int64_t per_16_bytes = std::max<int64_t>(1, 16 / static_cast<int64_t>(element_size(dtype)));
  return (offset + per_16_bytes - 1) / per_16_bytes * per_16_bytes;
}

FlatLayout::FlatLayout(std::vector<FlatEntry> entries, DType dtype, int world_size)
    : entries_(std::move(entries)), dtype_(dtype), world_size_(world_size) {
  TS_CHECK(world_size > 0, ValueError, "FlatLayout: world size must be positive, got ", world_size);
  int64_t next = 0;
  for (FlatEntry& entry : entries_) {
    entry.numel = shape_numel(entry.shape);
    entry.offset = align_offset(next, dtype);
    next = entry.offset + entry.numel;
  }
  flat_numel_ = next;
  padded_numel_ = (flat_numel_ + world_size - 1) / world_size * world_size;
}

ElementRange FlatLayout::shard_range(int rank) const {
  TS_CHECK(rank >= 0 && rank < world_size_, IndexError, "shard_range: rank ", rank, " of a world of ", world_size_);
  return {rank * shard_numel(), (rank + 1) * shard_numel()};
}

ElementRange FlatLayout::overlap(size_t index, const ElementRange& range) const {
  const FlatEntry& entry = entries_.at(index);
  ElementRange out{std::max(entry.offset, range.begin), std::min(entry.offset + entry.numel, range.end)};
  if (out.end < out.begin) out.end = out.begin;
  return out;
}

}  // namespace tessera::fsdp
