// An exclusive lock on a checkpoint folder for as long as the object lives: two jobs
// writing one folder would prune, replace and re-point each other's checkpoints at random.
//
// flock(LOCK_EX | LOCK_NB) on "<root>/.lock", which then says who holds it ("pid 4242 on
// host 'node3' since 2026-12-01 09:30:00 UTC: build/examples/mnist --checkpoint-dir ckpt");
// a second job is refused at once with that line. The lock is released when the object is
// destroyed or the process dies, however it dies, so a killed job never leaves a stale
// lock. The file itself stays (removing it could let two jobs lock two different files).
// flock works across hosts on NFSv4 (the Linux client maps it to a byte-range lock).
//
// One process of a job takes it (the CheckpointManager's rank 0). Internal.
#pragma once

#include <string>

#include "tessera/io/posix_file.h"

namespace tessera::checkpoint::detail {

class FolderLock {
 public:
  // Creates `root` if needed and takes the lock; CheckpointError naming the holder when
  // another process holds it, IOError when the file cannot be opened.
  explicit FolderLock(const std::string& root);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  io::FileDescriptor fd_;
};

// "pid 4242 on host 'node3' since ...: <command line>", this process's line in the lock file.
std::string lock_holder_line();

// The line of the process that holds the lock file `path` now ("holder unknown" when it
// wrote none), or "" when no process holds it. Looks without taking the lock or changing the file.
std::string current_lock_holder(const std::string& path);

}  // namespace tessera::checkpoint::detail
