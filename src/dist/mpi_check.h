// TS_MPI_CHECK(call): runs an MPI call and throws DistError naming the expression, the
// error string, the rank, the file and the line when it does not return MPI_SUCCESS.
// Communicators made by Tessera use MPI_ERRORS_RETURN, so failures reach this check
// instead of aborting inside MPI. Internal: users never need <mpi.h> from Tessera.
#pragma once

// Only MPI's C interface: its deprecated C++ bindings are not used and do not compile
// cleanly with warnings on.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

namespace tessera::detail {

[[noreturn]] void throw_mpi_error(int code, const char* expression, const char* file, int line);

}  // namespace tessera::detail

#define TS_MPI_CHECK(expression)                                                       \
  do {                                                                                 \
    int ts_mpi_code_ = (expression);                                                   \
    if (ts_mpi_code_ != MPI_SUCCESS)                                                   \
      ::tessera::detail::throw_mpi_error(ts_mpi_code_, #expression, __FILE__, __LINE__); \
  } while (false)
