// The checkpoint flags the training examples share (--checkpoint-dir, --checkpoint-every,
// --keep-checkpoints, --resume, --overwrite-checkpoints, --async-checkpoint): read and checked
// in one place, and the CheckpointManager they ask for, which claims its folder before training.
//
//   example::CheckpointFlags checkpoints;                   // in the example's Options
//   while (args.next()) {
//     if (checkpoints.read(args)) continue;
//     ...
//   }
//   checkpoints.check(args);
//   auto manager = checkpoints.open(*world);                 // nullopt without --checkpoint-dir
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <tessera/tessera.h>

#include "command_line.h"

namespace example {

struct CheckpointFlags {
  std::string dir;        // --checkpoint-dir; empty: no checkpoints
  int64_t every = 0;      // --checkpoint-every: optimizer steps; 0: the example's default
  int keep = 3;           // --keep-checkpoints; 0 keeps all
  bool resume = false;    // --resume
  bool overwrite = false; // --overwrite-checkpoints
  bool async = false;     // --async-checkpoint: training goes on while a checkpoint is written

  // Takes the current flag when it is one of the six (and says so).
  bool read(CommandLine& args) {
    const std::string& flag = args.flag();
    if (flag == "--checkpoint-dir") dir = args.value();
    else if (flag == "--checkpoint-every") every = args.number<int64_t>();
    else if (flag == "--keep-checkpoints") keep = args.number<int>();
    else if (flag == "--resume") resume = true;
    else if (flag == "--overwrite-checkpoints") overwrite = true;
    else if (flag == "--async-checkpoint") async = true;
    else return false;
    return true;
  }

  // Usage errors (status 2) for flags that need or contradict one another.
  void check(const CommandLine& args) const {
    if (resume && dir.empty()) args.error("--resume needs --checkpoint-dir");
    if (overwrite && (dir.empty() || resume)) {
      args.error("--overwrite-checkpoints needs --checkpoint-dir, and contradicts --resume");
    }
    if (async && dir.empty()) args.error("--async-checkpoint needs --checkpoint-dir");
  }

  // Whether the step just finished is one --checkpoint-every saves after.
  bool due(uint64_t step) const { return every > 0 && step % static_cast<uint64_t>(every) == 0; }

  // The run's checkpoint folder (nullopt without --checkpoint-dir). Unless resuming, it is
  // claimed now (collective): another job in it, or another run's checkpoints without
  // --overwrite-checkpoints, fail before training rather than at the first save.
  std::optional<tessera::checkpoint::CheckpointManager> open(tessera::dist::ProcessGroup& world) const {
    if (dir.empty()) return std::nullopt;
    std::optional<tessera::checkpoint::CheckpointManager> manager;
    manager.emplace(dir, tessera::checkpoint::CheckpointManagerOptions{.keep_last = keep, .overwrite = overwrite,
                                                                       .async_save = async});
    if (!resume) manager->claim(world);
    return manager;
  }
};

}  // namespace example
