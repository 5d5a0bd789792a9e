// init(): the world group, over MPI when an MPI launcher started the process, else one rank.
#include "tessera/dist/init.h"

#include <cctype>
#include <cerrno>
#include <cmath>
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

std::chrono::milliseconds timeout_from_environment() { return parse_timeout(std::getenv("TESSERA_DIST_TIMEOUT")); }

std::chrono::milliseconds parse_timeout(const char* value) {
  if (value == nullptr || *value == '\0') return kDefaultTimeout;
  std::string_view text(value);
  char* end = nullptr;
  errno = 0;
  const double seconds = std::strtod(value, &end);
  // At least a millisecond, at most a year: beyond that the number is surely a mistake.
  const bool plain_decimal = (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.') &&
                             text.find_first_of("xXpP") == std::string_view::npos;  // no hex, no sign, no space
  const bool valid = plain_decimal && end == value + text.size() && errno == 0 && std::isfinite(seconds) &&
                     seconds >= 0.001 && seconds <= 365.0 * 24 * 3600;
  TS_CHECK(valid, ValueError, "TESSERA_DIST_TIMEOUT=", text,
           ": expected the collective timeout in seconds, a number from 0.001 to 31536000 (e.g. 600)");
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000.0)));
}

namespace {

std::shared_ptr<ProcessGroup> start_world(int* argc, char*** argv, const InitOptions& options) {
  bool debug = debug_mode_from_environment();
  std::chrono::milliseconds timeout = options.timeout ? *options.timeout : timeout_from_environment();
  TS_CHECK(timeout.count() > 0, ValueError, "tessera::dist::init: InitOptions::timeout must be positive, got ",
           timeout.count(), " ms");
  std::optional<std::string> launcher = mpi_launcher_variable();
  if (!launcher) return std::make_shared<SingleProcessGroup>("world", debug, timeout);
#if TESSERA_HAS_MPI
  std::shared_ptr<MpiRuntime> runtime = MpiRuntime::start(argc, argv);
  MPI_Comm world = MPI_COMM_NULL;
  TS_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world));  // Tessera's traffic stays apart from the program's
  return MpiProcessGroup::create(std::move(runtime), world, "world", debug, timeout);
#else
  (void)argc;
  (void)argv;
  throw NotCompiledError(detail::concat("tessera::dist::init: started by an MPI launcher (", *launcher,
                                        ") but this Tessera was built without MPI; each process would "
                                        "silently train alone. Rebuild with -Dmpi=enabled"));
#endif
}

std::shared_ptr<ProcessGroup> cached_world(int* argc, char*** argv, const InitOptions& options) {
  // The process's one world group; dropped at static destruction, which lets MPI finalize.
  static std::mutex mutex;
  static std::shared_ptr<ProcessGroup> world;
  std::lock_guard lock(mutex);
  if (!world) world = start_world(argc, argv, options);
  return world;
}

}  // namespace

std::shared_ptr<ProcessGroup> init(int& argc, char**& argv, const InitOptions& options) {
  return cached_world(&argc, &argv, options);
}

std::shared_ptr<ProcessGroup> init(const InitOptions& options) { return cached_world(nullptr, nullptr, options); }

}  // namespace tessera::dist
