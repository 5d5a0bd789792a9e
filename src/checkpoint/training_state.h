// Where a training run stands, as a checkpoint records it: everything besides the model,
// optimizer and scheduler that decides the next steps. Tessera's randomness is
// counter-based (dropout masks are keyed by (seed, step, global row), the shuffle of an
// epoch by (seed, epoch)), so the seed, the step and the position in the epoch are the
// whole random state; Generators a program draws from itself can be recorded by name.
//
//   ts::checkpoint::TrainingState state{.step = step, .epoch = epoch, .batch = batch + 1, .seed = seed};
//   state.extra.set("loss_sum", loss_sum);
//   ...
//   for (const auto& batch : loader.epoch(state.epoch, state.batch)) { ... }   // after a resume
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "tessera/io/json.h"
#include "tessera/tensor/random.h"

namespace tessera::checkpoint {

// A Generator's position: Generator(seed, stream) advanced by `offset` elements.
struct GeneratorState {
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint64_t offset = 0;

  static GeneratorState of(const Generator& generator);
  Generator restore() const;
  bool operator==(const GeneratorState&) const = default;
};

struct TrainingState {
  uint64_t step = 0;   // optimizer steps taken: the step number the next batch runs as
  int64_t epoch = 0;   // the epoch in progress
  int64_t batch = 0;   // batches of `epoch` already done: resume with loader.epoch(epoch, batch)
  uint64_t seed = 0;   // the run's seed (initialisation, shuffling, dropout)
  std::map<std::string, GeneratorState> generators = {};
  // Anything else the program wants back (running sums, a configuration to check), as a
  // JSON object. Numbers must be finite (JSON has no NaN).
  io::json::Value extra = io::json::Object{};
};

}  // namespace tessera::checkpoint
