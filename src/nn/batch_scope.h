// Where in training a forward pass runs: the step and the global row of the batch's first
// sample. Dropout keys its masks by (seed, step, global row, element), so a model trained
// on N ranks (each seeing its rows of the global batch) drops exactly what one rank would.
//
//   for (const auto& batch : loader.epoch(epoch)) {
//     ts::nn::BatchScope scope({.seed = seed, .step = step, .first_row = batch.first_row});
//     auto output = model(batch.data);
//     ...
//   }
//
// Without a scope, Dropout keys its masks by the default generator (ts::manual_seed): its
// seed, and the next step of its sequence for each call; rows start at 0.
#pragma once

#include <cstdint>

namespace tessera::nn {

struct BatchPosition {
  uint64_t seed = 0;
  uint64_t step = 0;
  int64_t first_row = 0;
};

// Sets the batch position for this thread for its lifetime (scopes nest).
class BatchScope {
 public:
  explicit BatchScope(const BatchPosition& position);
  ~BatchScope();
  BatchScope(const BatchScope&) = delete;
  BatchScope& operator=(const BatchScope&) = delete;
  // The innermost position on this thread, or null outside any scope.
  static const BatchPosition* current();

 private:
  BatchPosition position_;
  const BatchPosition* previous_;
};

}  // namespace tessera::nn
