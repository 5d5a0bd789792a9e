// A folder of checkpoints written during training, and the `latest` pointer:
//
//   checkpoints/
//     step-00000100/      a complete sharded checkpoint (sharded.h)
//     step-00000200/
//     latest              "step-00000200\n": the newest complete checkpoint
//
// save(): the checkpoint is written to ".step-00000200.tmp", fsynced and renamed (see
// sharded.h); only then is `latest` replaced (a temporary file, fsynced, renamed over it,
// the folder fsynced). A crash at any moment leaves `latest` naming a complete checkpoint
// (or absent, before the first save completed). Older checkpoints beyond `keep_last` are
// then removed (renamed to a hidden name first, so a crash never leaves half of one).
//
//   ts::checkpoint::CheckpointManager checkpoints("checkpoints", {.keep_last = 3});
//   if (auto state = checkpoints.restore(model, {.optimizer = &adam, .scheduler = &lr})) {
//     step = state->step; ...                                  // resumed
//   }
//   ...
//   checkpoints.save(model, {.optimizer = &adam, .scheduler = &lr}, {.step = step, ...});
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/checkpoint/sharded.h"

namespace tessera::checkpoint {

struct CheckpointManagerOptions {
  int keep_last = 0;  // checkpoints to keep, the latest included; 0 keeps all
};

class CheckpointManager {
 public:
  explicit CheckpointManager(std::string root, CheckpointManagerOptions options = {});

  const std::string& root() const { return root_; }

  // Saves a sharded checkpoint as "<root>/step-<training.step>" (replacing one of that step),
  // moves `latest` to it and prunes. Collective. Returns the checkpoint's path.
  std::string save(nn::Module& model, const Stateful& with, const TrainingState& training);

  // The path `latest` names, or nullopt when there is none yet. FormatError when `latest`
  // is unreadable or names something that is not a checkpoint folder of this root.
  std::optional<std::string> latest() const;
  // Loads the latest checkpoint (collective); nullopt, changing nothing, when there is none.
  std::optional<TrainingState> restore(nn::Module& model, const Stateful& with = {}) const;
  // The complete checkpoints' paths ("step-N" folders with a metadata.json), oldest first.
  std::vector<std::string> checkpoints() const;

  // "step-00000200" for step 200 (at least 8 digits).
  static std::string directory_name(uint64_t step);

 private:
  void save_here(nn::Module& model, const Stateful& with, const TrainingState& training);

  std::string root_;
  CheckpointManagerOptions options_;
};

// The checkpoint at `path`, whichever kind: a sharded checkpoint folder, a
// CheckpointManager's root (its latest), or a full checkpoint file.
std::string resolve(const std::string& path);
// Opens it for reading (a ShardedCheckpoint or a FullCheckpoint).
std::unique_ptr<FlatSource> open(const std::string& path);
// Loads it into `model` and `with`. Collective.
TrainingState load(const std::string& path, nn::Module& model, const Stateful& with = {});

}  // namespace tessera::checkpoint
