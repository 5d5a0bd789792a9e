// What a checkpoint saves and restores besides the model: the optimizer (its parameter
// groups' hyper-parameters and per-parameter state) and the learning-rate scheduler, each
// optional.
//
//   ts::checkpoint::save_sharded(dir, model, {.optimizer = &adamw, .scheduler = &schedule}, state);
#pragma once

#include "tessera/optim/lr_scheduler.h"
#include "tessera/optim/optimizer.h"

namespace tessera::checkpoint {

struct Stateful {
  // Built after fsdp::fully_shard, from the model's flat shards (model.parameters()) or its
  // original parameters (fsdp::named_original_parameters(model)), in any parameter groups.
  optim::Optimizer* optimizer = nullptr;
  optim::LRScheduler* scheduler = nullptr;  // any scheduler: StepLR, SequentialLR, ...
};

}  // namespace tessera::checkpoint
