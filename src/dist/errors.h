// Errors of the distributed runtime. Like every Tessera error they are exceptions whose
// messages name the rank, the group and the call; the library never aborts by itself
// (the one exception, the terminate handler that init() installs, is in mpi_runtime.h).
#pragma once

#include "tessera/tensor/error.h"

namespace tessera::dist {

// An MPI or NCCL call failed, or the runtime could not start.
class DistError : public Error {
 public:
  using Error::Error;
};

// Debug mode (TESSERA_DIST_DEBUG=1) found ranks issuing different collectives at the same
// point. Thrown on every rank of the group, with each rank's call in the message.
class CollectiveMismatch : public DistError {
 public:
  using DistError::DistError;
};

}  // namespace tessera::dist
