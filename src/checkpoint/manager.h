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
// then removed (renamed to a hidden name first, so a crash never leaves half of one), but
// never the newest one whose state was finite while only non-finite ones are kept.
//
// Asynchronous saves (`async_save`, as PyTorch's dcp.async_save): save() copies this
// rank's part (shards, optimizer state, buffers, the training position) into host memory
// and returns; a background thread then writes, fsyncs, renames and moves `latest` exactly
// as above, its collectives on a duplicate of the model's group. One save is in flight at
// most: the next save() waits for it. Its failure is reported, on every rank, by the next
// save(), wait() or poll(), and leaves the previous checkpoint as it was.
//
// Every save refuses parameters or buffers holding NaN or infinities (a run that
// diverged), naming the first such element, unless `allow_non_finite`; each checkpoint records whether it was
// finite (Manifest::finite).
//
// One run owns a folder at a time. Rank 0 locks it (folder_lock.h) for the manager's
// lifetime, so a second job is refused at once, naming the first. A run that did not
// resume from the folder's checkpoints refuses to save over them (it would prune or
// replace them) unless told to (`overwrite`). restore() resumes from `latest`, or, when
// `latest` is missing or unusable, from the newest complete step folder, saying so;
// never from scratch while checkpoints exist.
//
//   ts::checkpoint::CheckpointManager checkpoints("checkpoints", {.keep_last = 3, .async_save = true});
//   if (auto state = checkpoints.restore(model, {.optimizer = &adam, .scheduler = &lr})) {
//     step = state->step; ...                                  // resumed
//   }
//   ...                                                        // each step:
//   if (step % 100 == 0) checkpoints.save(model, {.optimizer = &adam, .scheduler = &lr}, {.step = step, ...});
//   else checkpoints.poll();                                   // reports a failed save promptly
//   ...
//   checkpoints.wait();                                        // the last save is on disk
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
  // save() returns once this rank's part is copied into host memory (pinned when the model
  // is on a GPU), and a background thread writes it; see above. Needs MPI_THREAD_MULTIPLE
  // under mpirun (the writes' collectives run beside training's).
  bool async_save = false;
  // Save parameters and buffers that hold NaN or infinities (recorded as such). Without it
  // such a save is refused: CheckpointError naming the first element. (Optimizer state is
  // not checked: see finite.h.)
  bool allow_non_finite = false;
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
  // moves `latest` to it and prunes. Collective. Returns the checkpoint's path. With
  // async_save it first waits for the save in flight (throwing its failure, as wait()
  // does), copies this rank's part into host memory and returns: the checkpoint appears,
  // and `latest` moves to it, once every rank has written its part.
  std::string save(nn::Module& model, const Stateful& with, const TrainingState& training);

  // Waits for the asynchronous save in flight, if any. When it failed on any rank it throws,
  // on every rank (CheckpointError naming the checkpoint and the first failure), once;
  // `latest` then still names the checkpoint before it. Call it on every rank.
  void wait();
  // The step hook: cheap when no save is in flight (nothing is sent); otherwise the ranks
  // agree (one all-reduce over the model's group) whether every rank's write has finished,
  // and if so wait() reports its outcome. Returns whether a save is still in flight.
  // Collective while one is: call it at the same step on every rank.
  bool poll();
  // Host bytes holding staged copies for asynchronous saves (kept for the next save), on
  // this rank; also listed among the holders when an allocation is refused past a memory limit.
  int64_t staging_bytes() const;

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
  struct AsyncSave;

  void save_here(nn::Module& model, const Stateful& with, const TrainingState& training);
  void start_async_save(nn::Module& model, const Stateful& with, const TrainingState& training);

  std::string root_;
  CheckpointManagerOptions options_;
  std::unique_ptr<detail::FolderLock> lock_;  // rank 0, once claimed
  bool claimed_ = false;
  std::optional<ResumePoint> resumed_from_;
  // Asynchronous saves: the staged copy, the writers' groups and the save in flight (last:
  // destroyed first, so its thread is joined before what it uses goes).
  std::unique_ptr<AsyncSave> async_;
};

// The checkpoint at `path`, whichever kind: a sharded checkpoint folder, a
// CheckpointManager's root (its resume point), or a full checkpoint file.
std::string resolve(const std::string& path);
// Opens it for reading (a ShardedCheckpoint or a FullCheckpoint).
std::unique_ptr<FlatSource> open(const std::string& path);
// Loads it into `model` and `with`. Collective.
TrainingState load(const std::string& path, nn::Module& model, const Stateful& with = {});

}  // namespace tessera::checkpoint
