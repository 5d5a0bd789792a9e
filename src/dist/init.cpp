// init(): the world group, over MPI when an MPI launcher started the process, else one rank.
#include "tessera/dist/init.h"

#include <cstdlib>
#include <mutex>
#include <string_view>

#include "tessera/config.h"
#include "tessera/dist/errors.h"
#include "tessera/dist/single_process_group.h"

#if TESSERA_HAS_MPI
#include "tessera/dist/mpi_check.h"
#include "tessera/dist/mpi_process_group.h"
#endif

namespace tessera::dist {

std::optional<std::string> mpi_launcher_variable() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (const char* value = std::getenv(name)) return detail::concat(name, "=", value);
  }
  return std::nullopt;
}

bool launched_by_mpirun() { return mpi_launcher_variable().has_value(); }

bool debug_mode_from_environment() { return parse_debug_mode(std::getenv("TESSERA_DIST_DEBUG")); }

bool parse_debug_mode(const char* value) {
  if (value == nullptr) return false;
  std::string_view text(value);
  if (text.empty() || text == "0") return false;
  if (text == "1") return true;
  throw ValueError(detail::concat("TESSERA_DIST_DEBUG=", text, ": expected 1 (debug checks on) or 0 (off)"));
}

namespace {

std::shared_ptr<ProcessGroup> start_world(int* argc, char*** argv) {
  bool debug = debug_mode_from_environment();
  std::optional<std::string> launcher = mpi_launcher_variable();
  if (!launcher) return std::make_shared<SingleProcessGroup>("world", debug);
#if TESSERA_HAS_MPI
  std::shared_ptr<MpiRuntime> runtime = MpiRuntime::start(argc, argv);
  MPI_Comm world = MPI_COMM_NULL;
  TS_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world));  // Tessera's traffic stays apart from the program's
  return MpiProcessGroup::create(std::move(runtime), world, "world", debug);
#else
  (void)argc;
  (void)argv;
  throw NotCompiledError(detail::concat("tessera::dist::init: started by an MPI launcher (", *launcher,
                                        ") but this Tessera was built without MPI; each process would "
                                        "silently train alone. Rebuild with -Dmpi=enabled"));
#endif
}

std::shared_ptr<ProcessGroup> cached_world(int* argc, char*** argv) {
  // The process's one world group; dropped at static destruction, which lets MPI finalize.
  static std::mutex mutex;
  static std::shared_ptr<ProcessGroup> world;
  std::lock_guard lock(mutex);
  if (!world) world = start_world(argc, argv);
  return world;
}

}  // namespace

std::shared_ptr<ProcessGroup> init(int& argc, char**& argv) { return cached_world(&argc, &argv); }

std::shared_ptr<ProcessGroup> init() { return cached_world(nullptr, nullptr); }

}  // namespace tessera::dist
