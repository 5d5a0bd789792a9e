// A live sharded model as a FlatSource (internal): this rank's slices of every flat
// parameter and optimizer state tensor, as views of the shards (no copies on the CPU).
// Only the elements of this rank's shard can be read.
#pragma once

#include "tessera/checkpoint/flat_source.h"
#include "tessera/checkpoint/model_view.h"

#include <vector>

namespace tessera::checkpoint::detail {

class ModelSource final : public FlatSource {
 public:
  // `manifest` is describe(model, with, ...); its units are in `view`'s order.
  ModelSource(const ModelView& view, const Stateful& with, Manifest manifest)
      : view_(view), with_(with), manifest_(std::move(manifest)) {}

  const Manifest& manifest() const override { return manifest_; }
  void read(size_t unit, const std::string& state, int64_t first, const Tensor& destination) const override;
  Tensor slice(size_t unit, const std::string& state, int64_t first, int64_t count) const override;
  Tensor buffer(const std::string& name) const override;

  // The elements of unit `unit` this rank holds: its shard range clipped to the flat vector.
  fsdp::ElementRange held(size_t unit) const;
  // The elements of unit `unit` this rank writes: those it holds, or, for a unit every rank
  // holds whole (NO_SHARD), its even share of the writing.
  fsdp::ElementRange written(size_t unit) const;
  // Elements [first, first + count) of this rank's shard of `state`, where the shard lives
  // (a view on the CPU or the GPU; slice() brings them to the CPU).
  Tensor shard_slice(size_t unit, const std::string& state, int64_t first, int64_t count) const;
  // Elements [first, first + count) of this rank's shard of optimizer state `state`, as the
  // optimizer holds them, without assembling the shard: one piece when it steps the flat
  // shard, else each original parameter's part (the elements between pieces are zero).
  struct StatePiece {
    int64_t first = 0;  // its first element in the unit's flat vector
    Tensor values;      // a view of the optimizer's state, where it lives
  };
  std::vector<StatePiece> state_pieces(size_t unit, const std::string& state, int64_t first, int64_t count) const;
  // Copies those elements into `destination` (1-D, `count` elements, any device).
  void copy_state_slice(size_t unit, const std::string& state, int64_t first, Tensor destination) const;
  // Records in the manifest whether the state saved is finite (Manifest::finite).
  void record_finite(bool finite) { manifest_.finite = finite; }
  // This rank's whole shard of flat tensor `state` (padding included): for optimizer state
  // assembled from the parameters' segments when the optimizer steps original parameters.
  Tensor shard(size_t unit, const std::string& state) const;

 private:
  const ModelView& view_;
  Stateful with_;
  Manifest manifest_;
};

}  // namespace tessera::checkpoint::detail
