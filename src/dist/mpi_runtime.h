// MpiRuntime: the process's MPI session. start() calls MPI_Init_thread once per process;
// the runtime calls MPI_Finalize when its last owner lets go. Owners are the MPI process
// groups (each holds a shared_ptr) and init()'s cached world group, which lives until
// static destruction at exit; so MPI is finalized after every group's communication thread
// has been joined and its communicator freed, whatever order user objects die in.
//
// start() also installs the job-abort terminate handler: an uncaught exception on any rank
// (any thread) prints "tessera::dist: rank R of N: uncaught ..." and calls
// MPI_Abort(MPI_COMM_WORLD, 1), so mpirun ends every other rank within moments instead of
// leaving them blocked in a collective. A terminate handler the program installed before
// init() is chained to: it runs after that message, before the abort. That is the one
// place Tessera ends a process, and only where std::terminate would have ended it anyway.
//
// Before finalizing, the runtime runs the ExitWatch's exit handshake (exit_watch.h), so
// a rank returning from main while the others wait in a collective ends the job instead of
// hanging it. The CollectiveWatchdog (watchdog.h) ends it when a collective times out or
// can never complete.
//
// Internal (needs <mpi.h>); init() is the public way in.
#pragma once

#include <memory>

#include "tessera/dist/exit_watch.h"
#include "tessera/dist/watchdog.h"

namespace tessera::dist {

class MpiRuntime {
 public:
  // Initialises MPI (MPI_THREAD_MULTIPLE requested, MPI_THREAD_SERIALIZED at least) or
  // adopts an MPI the program initialised itself, which it then leaves to the program to
  // finalize. Throws DistError when MPI cannot start or was already finalized.
  static std::shared_ptr<MpiRuntime> start(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // Several groups' threads may call MPI at once only with MPI_THREAD_MULTIPLE.
  bool thread_multiple() const { return thread_multiple_; }
  // Null when the watch does not run (see exit_watch.h).
  ExitWatch* exit_watch() const { return exit_watch_.get(); }
  // Null when the watchdog does not run: where the exit watch does not.
  CollectiveWatchdog* watchdog() const { return watchdog_.get(); }

 private:
  MpiRuntime() = default;
  bool owns_mpi_ = false;
  bool thread_multiple_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
  std::unique_ptr<ExitWatch> exit_watch_;
  std::unique_ptr<CollectiveWatchdog> watchdog_;
};

// True once MPI_Init has run and MPI_Finalize has not.
bool mpi_is_running();

}  // namespace tessera::dist
