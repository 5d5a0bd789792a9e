// What a checkpoint saves and restores besides the model: the optimizer (hyper-parameters
// and per-parameter state) and the learning-rate scheduler, each optional.
//
//   ts::checkpoint::save_sharded(dir, model, {.optimizer = &adam, .scheduler = &step_lr}, state);
#pragma once

#include "tessera/optim/optimizer.h"
#include "tessera/optim/step_lr.h"

namespace tessera::checkpoint {

struct Stateful {
  optim::Optimizer* optimizer = nullptr;  // built from model.parameters() after fsdp::fully_shard
  optim::StepLR* scheduler = nullptr;
};

}  // namespace tessera::checkpoint
