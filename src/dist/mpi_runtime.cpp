// Starting and finalizing MPI, the abort-the-job terminate handler, and TS_MPI_CHECK's
// error path.
#include "tessera/dist/mpi_runtime.h"

#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <typeinfo>

#include "tessera/dist/errors.h"
#include "tessera/dist/mpi_check.h"

namespace tessera::dist {

bool mpi_is_running() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

namespace {

std::string demangled(const char* name) {
  int status = 0;
  char* readable = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string result = status == 0 && readable ? readable : name;
  std::free(readable);
  return result;
}

std::string current_exception_text() {
  std::exception_ptr error = std::current_exception();
  if (!error) return "std::terminate called without an active exception";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return detail::concat("uncaught exception (", demangled(typeid(e).name()), "): ", e.what());
  } catch (...) {
    return "uncaught exception of a type not derived from std::exception";
  }
}

// The handler in place when the library was loaded (the C++ runtime's own), and the one
// in place when init() installed ours: a program's own handler when the two differ.
const std::terminate_handler runtime_terminate_handler = std::get_terminate();
std::terminate_handler previous_terminate_handler = nullptr;

[[noreturn]] void abort_job_on_terminate() {
  std::string text = current_exception_text();
  const bool mpi = mpi_is_running();
  int rank = -1;
  int size = 0;
  if (mpi) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::fprintf(stderr, "tessera::dist: rank %d of %d: %s\n", rank, size, text.c_str());
  } else {
    std::fprintf(stderr, "tessera::dist: %s\n", text.c_str());
  }
  std::fflush(stderr);
  // A handler the program installed before init() still runs, after the message above: it
  // may log or flush, and when it ends the process mpirun sees the rank die and ends the
  // job. Only if it returns (which a terminate handler must not) does the job abort here.
  if (previous_terminate_handler != nullptr && previous_terminate_handler != runtime_terminate_handler) {
    std::terminate_handler program_handler = previous_terminate_handler;
    previous_terminate_handler = nullptr;  // never run twice
    program_handler();
  }
  if (mpi) {
    std::fprintf(stderr, "tessera::dist: rank %d aborts the MPI job\n", rank);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  std::abort();  // MPI_Abort does not return; this is for the case without MPI
}

}  // namespace

std::shared_ptr<MpiRuntime> MpiRuntime::start(int* argc, char*** argv) {
  static std::mutex start_mutex;
  static std::weak_ptr<MpiRuntime> current;
  std::lock_guard lock(start_mutex);
  if (auto running = current.lock()) return running;

  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) throw DistError("tessera::dist::init: MPI was already finalized in this process; it cannot restart");

  std::shared_ptr<MpiRuntime> runtime(new MpiRuntime());
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    TS_MPI_CHECK(MPI_Query_thread(&provided));
  } else {
    TS_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    runtime->owns_mpi_ = true;
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    if (runtime->owns_mpi_) MPI_Finalize();
    throw DistError(detail::concat(
        "tessera::dist::init: MPI provides thread level ", provided,
        " but Tessera runs collectives on a communication thread and needs MPI_THREAD_SERIALIZED (",
        MPI_THREAD_SERIALIZED, ") or MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")"));
  }
  runtime->thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  TS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &runtime->world_rank_));
  TS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &runtime->world_size_));
  if (runtime->owns_mpi_ && runtime->thread_multiple_ && runtime->world_size_ > 1) {
    runtime->exit_watch_ = std::make_unique<ExitWatch>();
    runtime->watchdog_ = std::make_unique<CollectiveWatchdog>();
  }
  std::terminate_handler previous = std::set_terminate(abort_job_on_terminate);
  if (previous != abort_job_on_terminate) previous_terminate_handler = previous;  // chained to (above)
  current = runtime;
  return runtime;
}

MpiRuntime::~MpiRuntime() {
  if (!mpi_is_running()) return;
  if (exit_watch_) {
    watchdog_->exiting();  // still answering the others' questions while this rank waits for them
    try {
      exit_watch_->announce_exit_and_wait();
    } catch (const std::exception& error) {  // a destructor must not throw; MPI_Finalize still runs
      std::fprintf(stderr, "tessera::dist: rank %d: exit handshake failed: %s\n", world_rank_, error.what());
    }
    exit_watch_.reset();  // each frees its control channel
    watchdog_.reset();
  }
  if (owns_mpi_) MPI_Finalize();
}

}  // namespace tessera::dist

namespace tessera::detail {

void throw_mpi_error(int code, const char* expression, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) std::snprintf(text, sizeof text, "unknown MPI error");
  int rank = -1;
  if (dist::mpi_is_running()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw dist::DistError(concat("MPI call failed on rank ", rank, ": ", expression, " returned ", code, " (", text,
                               ") at ", file, ":", line));
}

}  // namespace tessera::detail
