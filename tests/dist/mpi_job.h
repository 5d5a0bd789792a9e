// Running a worker program under `mpirun -np N` (2 unless told) and timing how its job ends, for the tests
// of job-level failure guarantees (dist's and FSDP's misuse tests). The worker prints a
// line "...; event <ns since epoch>" at the moment of the failure it provokes; the time from
// the latest such stamp to mpirun's exit is what the guarantees bound.
#pragma once

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "test_support.h"

namespace mpi_job {

struct JobResult {
  bool hung = false;
  bool exited = false;       // by exit(), not a signal
  int status = 0;            // exit code, or the signal number
  std::string output;        // stdout and stderr together
  double seconds_after_event = -1;  // from the latest "event" stamp to mpirun's exit
  double seconds_total = 0;
};

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline int64_t latest_event(const std::string& output) {
  int64_t latest = -1;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    size_t at = line.find("; event ");
    if (at != std::string::npos) latest = std::max<int64_t>(latest, std::stoll(line.substr(at + 8)));
  }
  return latest;
}

// Extra variables for the job's environment, e.g. {{"TESSERA_DIST_TIMEOUT", "2"}}.
using Environment = std::vector<std::pair<std::string, std::string>>;

// Runs `$<worker_variable> <scenario>` under `$MPIRUN -np <ranks>` (both paths from the
// environment, set by meson test), with debug mode on or off.
inline JobResult run_job(const char* worker_variable, const std::string& scenario, bool debug,
                         const Environment& environment = {}, int ranks = 2) {
  const char* mpirun = std::getenv("MPIRUN");
  const char* worker = std::getenv(worker_variable);
  REQUIRE_MESSAGE(mpirun != nullptr, "MPIRUN is not set (meson test sets it)");
  REQUIRE_MESSAGE(worker != nullptr, worker_variable, " is not set (meson test sets it)");
  std::filesystem::path log = std::filesystem::temp_directory_path() /
                              ("tessera_misuse_" + scenario + "_" + std::to_string(getpid()) + ".log");

  int64_t started = now_ns();
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    setpgid(0, 0);  // one process group, so a hang can be killed whole
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    if (debug) {
      setenv("TESSERA_DIST_DEBUG", "1", 1);
    } else {
      unsetenv("TESSERA_DIST_DEBUG");
    }
    unsetenv("TESSERA_DIST_TIMEOUT");
    for (const auto& [name, value] : environment) setenv(name.c_str(), value.c_str(), 1);
    const std::string np = std::to_string(ranks);
    execl(mpirun, mpirun, "-np", np.c_str(), "--oversubscribe", worker, scenario.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }

  JobResult result;
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) break;
    if (std::chrono::steady_clock::now() > deadline) {
      result.hung = true;
      kill(-child, SIGTERM);
      std::this_thread::sleep_for(std::chrono::seconds(2));
      kill(-child, SIGKILL);
      waitpid(child, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  int64_t ended = now_ns();
  result.exited = WIFEXITED(status);
  result.status = result.exited ? WEXITSTATUS(status) : WTERMSIG(status);
  std::ifstream in(log);
  result.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::filesystem::remove(log);
  result.seconds_total = (ended - started) / 1e9;
  int64_t event = latest_event(result.output);
  if (event > 0) result.seconds_after_event = (ended - event) / 1e9;
  return result;
}

using test_support::contains;

// The job failed within the bound, and no rank finished its work normally, except
// `resumed_rank` when given: a rank the scenario stopped (SIGSTOP) is continued by Open MPI's
// own teardown (its daemon sends SIGCONT before SIGTERM, so that a stopped process can die),
// and in that window its pending all-reduce, to which every other rank had contributed, may
// complete and the rank reach its end before SIGTERM arrives.
inline void check_failed_job(const JobResult& job, double bound_seconds, int resumed_rank = -1) {
  INFO("mpirun output:\n", job.output);
  CHECK_FALSE(job.hung);
  CHECK((!job.exited || job.status != 0));
  CHECK(job.seconds_after_event >= 0);
  CHECK(job.seconds_after_event < bound_seconds);
  const std::string allowed = "rank " + std::to_string(resumed_rank) + " finished normally";
  std::istringstream lines(job.output);
  for (std::string line; std::getline(lines, line);) {
    if (contains(line, "finished normally")) CHECK_MESSAGE(line.rfind(allowed, 0) == 0, line);
  }
}


}  // namespace mpi_job
