// Starting the distributed runtime.
//
//   int main(int argc, char** argv) {
//     auto world = ts::dist::init(argc, argv);   // under mpirun: N ranks; alone: 1 rank
//     std::printf("rank %d of %d\n", world->rank(), world->size());
//   }
//
// Under an MPI launcher (mpirun sets OMPI_COMM_WORLD_SIZE, PMIx launchers PMIX_RANK, Hydra
// PMI_SIZE/PMI_RANK) init() starts MPI and returns the world group (backend mpi), and
// installs a terminate handler that aborts the whole job when any rank dies of an uncaught
// exception (see docs/distributed.md). Started alone, it returns a SingleProcessGroup and
// never touches MPI: no daemon is needed and Open MPI's slow, container-fragile singleton
// start is avoided. Calling init() again returns the same group. MPI is finalized at exit.
//
// Debug mode: TESSERA_DIST_DEBUG=1 (on any rank) checks at every collective that all ranks
// issue the same call; see process_group.h and fingerprint.h.
//
// Collective timeout: a collective that waits longer than InitOptions::timeout (else
// TESSERA_DIST_TIMEOUT seconds, else 10 minutes, PyTorch's default) for the other ranks
// fails on every rank with a message naming the call, its sequence number and the ranks
// that did not arrive, and the MPI job is then aborted (docs/distributed.md).
//
//   auto world = ts::dist::init(argc, argv, {.timeout = std::chrono::seconds(60)});
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "tessera/dist/process_group.h"

namespace tessera::dist {

struct InitOptions {
  // How long one collective may wait for the other ranks; unset: TESSERA_DIST_TIMEOUT
  // (seconds), else kDefaultTimeout (10 minutes). Groups made from the world inherit it.
  std::optional<std::chrono::milliseconds> timeout{};
};

// The options apply to the first call; later calls return the same world group.
std::shared_ptr<ProcessGroup> init(int& argc, char**& argv, const InitOptions& options = {});
std::shared_ptr<ProcessGroup> init(const InitOptions& options = {});

// "OMPI_COMM_WORLD_SIZE=4" when an MPI launcher started this process, else nothing.
std::optional<std::string> mpi_launcher_variable();
bool launched_by_mpirun();

// TESSERA_DIST_DEBUG: unset, "" or "0" off, "1" on; anything else is a ValueError.
bool debug_mode_from_environment();
// The same rule for a given value (null: unset).
bool parse_debug_mode(const char* value);

// TESSERA_DIST_TIMEOUT: seconds, a positive decimal number ("600", "2.5"); unset or "":
// kDefaultTimeout. Anything else is a ValueError naming the variable and its text.
std::chrono::milliseconds timeout_from_environment();
// The same rule for a given value (null: unset).
std::chrono::milliseconds parse_timeout(const char* value);

}  // namespace tessera::dist
