// The checkpoint flags the training examples share (--checkpoint-dir, --checkpoint-every,
// --keep-checkpoints, --resume, --overwrite-checkpoints, --async-checkpoint): declared and
// checked in one place, and the CheckpointManager they ask for, which claims its folder before
// training.
//
//   example::CheckpointFlags checkpoints;                   // in the example's Options
//   checkpoints.declare(flags, "0: at the end only");       // what --checkpoint-every 0 means
//   flags.parse(argc, argv);
//   checkpoints.check(flags);
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

  // The six flags, into these fields; every_zero says what --checkpoint-every's default 0 does.
  void declare(Flags& flags, const std::string& every_zero) {
    flags.value("--checkpoint-dir", dir, "DIR",
                "save sharded checkpoints under DIR (DIR/step-00000200, ...; DIR/latest names the newest); "
                "each rank writes its own shard");
    flags.value("--checkpoint-every", every, "N",
                "save every N optimizer steps (counted across epochs), and at the end of training",
                {.default_text = every_zero});
    flags.value("--keep-checkpoints", keep, "K", "keep the newest K checkpoints; 0 keeps all");
    flags.toggle("--resume", resume,
                 "continue from DIR/latest (model, optimizer, learning rate schedule, data position, seed), "
                 "at any number of ranks; when latest is missing or damaged, from the newest complete "
                 "checkpoint, saying so; from scratch only when DIR holds no checkpoint");
    flags.toggle("--overwrite-checkpoints", overwrite,
                 "start a new run in a DIR holding another run's checkpoints, which its saves may then "
                 "replace and prune (without it, or with --resume, such a DIR is refused before training)");
    flags.toggle("--async-checkpoint", async,
                 "write checkpoints in the background: a save copies the state to host memory and training "
                 "goes on; latest moves once every rank's write is complete, and a failed write stops the "
                 "run at the next step");
  }

  // Usage errors (status 2) for flags that need or contradict one another.
  void check(const Flags& flags) const {
    if (resume && dir.empty()) flags.error("--resume needs --checkpoint-dir");
    if (overwrite && (dir.empty() || resume)) {
      flags.error("--overwrite-checkpoints needs --checkpoint-dir, and contradicts --resume");
    }
    if (async && dir.empty()) flags.error("--async-checkpoint needs --checkpoint-dir");
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
