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
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "tessera/dist/process_group.h"

namespace tessera::dist {

std::shared_ptr<ProcessGroup> init(int& argc, char**& argv);
std::shared_ptr<ProcessGroup> init();

// "OMPI_COMM_WORLD_SIZE=4" when an MPI launcher started this process, else nothing.
std::optional<std::string> mpi_launcher_variable();
bool launched_by_mpirun();

// TESSERA_DIST_DEBUG: unset, "" or "0" off, "1" on; anything else is a ValueError.
bool debug_mode_from_environment();
// The same rule for a given value (null: unset).
bool parse_debug_mode(const char* value);

}  // namespace tessera::dist
