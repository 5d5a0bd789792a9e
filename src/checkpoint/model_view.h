// A sharded model as checkpoints see it (internal): its units with their flat shards and
// names, where each optimizer parameter lives in them (a whole flat shard, or one original
// parameter's segment of it), its persistent buffers and the process group it is sharded over.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tessera/checkpoint/stateful.h"
#include "tessera/dist/process_group.h"
#include "tessera/fsdp/fully_shard.h"
#include "tessera/nn/module.h"

namespace tessera::checkpoint::detail {

struct ModelUnit {
  fsdp::UnitInfo info;
  std::string flat_parameter;  // "conv1._flat_param"
  // True when every rank holds the whole flat parameter (NO_SHARD); a save then splits the
  // writing evenly over the ranks.
  bool replicated = false;
};

// Where optimizer parameter i lives: its unit, and the layout entry it is (or the whole
// flat shard), with this rank's segment of the shard.
struct OptimizerParam {
  size_t unit = 0;
  int entry = -1;            // index in the unit's layout entries; -1: the whole flat shard
  std::string name;          // the entry's name ("fc1.weight") or the flat parameter's
  int64_t shard_offset = 0;  // this rank's segment of the shard: [shard_offset, + numel)
  int64_t numel = 0;
};

struct ModelView {
  nn::Module* model = nullptr;
  dist::ProcessGroup* group = nullptr;
  std::vector<ModelUnit> units;
  std::vector<OptimizerParam> optimizer_params;            // one per optimizer->params()
  std::vector<std::pair<std::string, Tensor*>> buffers;  // persistent, state_dict order

  // ValueError when `model` is not sharded or an optimizer parameter is neither one of its
  // flat shards nor one of its original parameters.
  static ModelView of(nn::Module& model, const optim::Optimizer* optimizer);
};

// Runs `step` (a save: files, `latest`, pruning) on the ranks of the model's first replica
// only, when the model is hybrid-sharded over several replicas (every replica holds the
// same state, and one writer per file is what keeps the folder consistent); the other
// replicas wait for it and fail with it. Without replicas, or nested inside another such
// step, it just runs `step`. Collective over the model's ranks.
void on_first_replica(nn::Module& model, const std::string& what, const std::function<void()>& step);
// The same over `replicas` (fsdp::replica_group, or a duplicate of it; null: no replicas).
void on_first_replica(dist::ProcessGroup* replicas, const std::string& what, const std::function<void()>& step);

// Elements [begin, end) of a flat vector of `flat_numel` elements that rank `rank` of
// `world_size` writes: FSDP's shard range, clipped to the unpadded vector.
fsdp::ElementRange save_range(int64_t flat_numel, int world_size, int rank);

}  // namespace tessera::checkpoint::detail
