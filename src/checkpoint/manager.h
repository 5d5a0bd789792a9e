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
// One run owns a folder at a time. Rank 0 locks it (folder_lock.h) for the manager's
// lifetime, so a second job is refused at once, naming the first. A run that did not
// resume from the folder's checkpoints refuses to save over them (it would prune or
// replace them) unless told to (`overwrite`). restore() resumes from `latest`, or, when
// `latest` is missing or unusable, from the newest complete step folder, saying so;
// never from scratch while checkpoints exist.
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
#include "tessera/dist/process_group.h"

namespace tessera::checkpoint {

namespace detail {
class FolderLock;
}

struct CheckpointManagerOptions {
  int keep_last = 0;  // checkpoints to keep, the latest included; 0 keeps all
  // Take over a folder holding another run's checkpoints: this run's saves may then replace
  // and prune them. Without it, a run that did not restore() from them refuses to save.
  bool overwrite = false;
};

// Where restore() resumes from, and why when it is not what `latest` names.
struct ResumePoint {
  std::string path;  // "<root>/step-00000400"
  std::string note;  // empty, or "'<root>/latest' is missing ...; resuming from the newest complete checkpoint, ..."
};

class CheckpointManager {
 public:
  explicit CheckpointManager(std::string root, CheckpointManagerOptions options = {});
  ~CheckpointManager();
  CheckpointManager(CheckpointManager&&) noexcept;
  CheckpointManager& operator=(CheckpointManager&&) noexcept;

  const std::string& root() const { return root_; }

  // Takes the folder for this run (collective over `group`): rank 0 locks it until this
  // manager is destroyed (CheckpointError naming the job that holds it), and, unless
  // `resuming` (restore() passes it) or options.overwrite, refuses a folder that already
  // holds checkpoints (`latest` or step folders). save() and restore() claim the folder
  // themselves; call it first to fail before training rather than at the first save.
  // IOError when the root exists but is not a folder.
  void claim(dist::ProcessGroup& group, bool resuming = false);

  // Saves a sharded checkpoint as "<root>/step-<training.step>" (replacing one of that step),
  // moves `latest` to it and prunes. Collective. Returns the checkpoint's path.
  std::string save(nn::Module& model, const Stateful& with, const TrainingState& training);

  // Loads the checkpoint resume_point() gives (collective; rank 0 decides, so every rank
  // loads the same); nullopt, changing nothing, when the folder holds no checkpoint at all.
  // The run then continues the folder's checkpoints (it may prune them).
  std::optional<TrainingState> restore(nn::Module& model, const Stateful& with = {});
  // Where the last restore() resumed from (nullopt before, or when there was nothing).
  const std::optional<ResumePoint>& resumed_from() const { return resumed_from_; }

  // What restore() would load: what `latest` names; when `latest` is missing, dangling, a
  // loop, not a regular file or corrupt, the newest step folder whose metadata and rank
  // files check out, with a note saying so. nullopt when the root holds no `latest` and no
  // step folder (or does not exist). CheckpointError, naming every reason, when it holds
  // some but none is usable: a run must not start from scratch over existing checkpoints.
  std::optional<ResumePoint> resume_point() const;
  // The path `latest` names, or nullopt when there is no `latest`. FormatError (or IOError)
  // when `latest` is unreadable or names something that is not a checkpoint of this root.
  std::optional<std::string> latest() const;
  // The complete checkpoints' paths ("step-N" folders with a metadata.json), oldest first.
  std::vector<std::string> checkpoints() const;

  // "step-00000200" for step 200 (at least 8 digits).
  static std::string directory_name(uint64_t step);

 private:
  void save_here(nn::Module& model, const Stateful& with, const TrainingState& training);

  std::string root_;
  CheckpointManagerOptions options_;
  std::unique_ptr<detail::FolderLock> lock_;  // rank 0, once claimed
  bool claimed_ = false;
  std::optional<ResumePoint> resumed_from_;
};

// The checkpoint at `path`, whichever kind: a sharded checkpoint folder, a
// CheckpointManager's root (its resume point), or a full checkpoint file.
std::string resolve(const std::string& path);
// Opens it for reading (a ShardedCheckpoint or a FullCheckpoint).
std::unique_ptr<FlatSource> open(const std::string& path);
// Loads it into `model` and `with`. Collective.
TrainingState load(const std::string& path, nn::Module& model, const Stateful& with = {});

}  // namespace tessera::checkpoint
