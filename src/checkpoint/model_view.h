// A sharded model as checkpoints see it (internal): its units with their flat shards and
// names, where each shard sits in the optimizer's parameter list, its persistent buffers
// and the process group it is sharded over.
#pragma once

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
  int optimizer_index = -1;    // its index in the optimizer's params(), or -1
  // True when every rank holds the whole flat parameter (NO_SHARD); a save then splits the
  // writing evenly over the ranks.
  bool replicated = false;
};

struct ModelView {
  nn::Module* model = nullptr;
  dist::ProcessGroup* group = nullptr;
  std::vector<ModelUnit> units;
  std::vector<std::pair<std::string, Tensor*>> buffers;  // persistent, state_dict order

  // ValueError when `model` is not sharded or an optimizer parameter is not one of its shards.
  static ModelView of(nn::Module& model, const optim::Optimizer* optimizer);
};

// Elements [begin, end) of a flat vector of `flat_numel` elements that rank `rank` of
// `world_size` writes: FSDP's shard range, clipped to the unpadded vector.
fsdp::ElementRange save_range(int64_t flat_numel, int world_size, int rank);

}  // namespace tessera::checkpoint::detail
