// Loading any checkpoint into a live sharded model (internal; load_sharded and load_full
// use it). Each rank opens the source, checks it against the model, optimizer and
// scheduler, and reads its shard's ranges into temporaries; the ranks then agree that all
// succeeded (and read the same checkpoint) before anything is changed.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "tessera/checkpoint/flat_source.h"

namespace tessera::checkpoint::detail {

TrainingState load_into_model(const std::string& what, const std::function<std::unique_ptr<FlatSource>()>& open,
                              nn::Module& model, const Stateful& with);

}  // namespace tessera::checkpoint::detail
