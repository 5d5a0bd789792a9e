// Load at any world size, driven from here because the loads need the 4-rank save to
// exist: reshard_worker saves under `mpirun -np 4`, then loads and resumes under
// `mpirun -np N` for N = 1, 2, 3, 4 (see reshard_worker.cpp for what each run checks);
// and an asynchronous save failing on one of 2 ranks.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "temp_dir.h"

namespace {

struct Job {
  int status = -1;
  std::string output;
};

// `mpirun -np <ranks> reshard_worker -tc=<test case>`, its output captured.
Job run_worker(int ranks, const std::string& test_case, const std::string& dir) {
  const char* mpirun = std::getenv("MPIRUN");
  const char* worker = std::getenv("RESHARD_WORKER");
  REQUIRE_MESSAGE(mpirun != nullptr, "MPIRUN is not set (meson test sets it)");
  REQUIRE_MESSAGE(worker != nullptr, "RESHARD_WORKER is not set (meson test sets it)");
  const std::string log = dir + "/mpirun-" + std::to_string(ranks) + ".log";
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    ::setenv("OMP_NUM_THREADS", "1", 1);
    ::setenv("CHECKPOINT_TEST_DIR", dir.c_str(), 1);
    const std::string np = std::to_string(ranks), filter = "-tc=" + test_case;
    ::execl(mpirun, mpirun, "-np", np.c_str(), "--oversubscribe", worker, filter.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  Job job;
  job.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  job.output = tessera::testing::read_file_bytes(log);
  return job;
}

// The worker's lines that report measured differences.
std::string measurements(const std::string& output) {
  std::istringstream lines(output);
  std::string found;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("worst relative difference") == std::string::npos) continue;
    std::string plain;  // without terminal colour codes
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '\x1b') {
        while (i < line.size() && line[i] != 'm') ++i;
      } else {
        plain += line[i];
      }
    }
    found += plain + "\n";
  }
  return found;
}

}  // namespace

TEST_CASE("a checkpoint saved at 4 ranks loads bit for bit at 1, 2, 3 and 4 ranks and resumes") {
  tessera::testing::TempDir dir;
  Job saved = run_worker(4, "save*", dir.path().string());
  INFO("mpirun -np 4 (save) output:\n", saved.output);
  REQUIRE(saved.status == 0);
  for (int ranks : {1, 2, 3, 4}) {
    Job loaded = run_worker(ranks, "load*", dir.path().string());
    INFO("mpirun -np ", ranks, " (load) output:\n", loaded.output);
    CHECK(loaded.status == 0);
    MESSAGE(measurements(loaded.output));
  }
}

TEST_CASE("a checkpoint of a 2 x 2 hybrid-sharded job loads bit for bit at 1, 3 and 4 ranks and resumes") {
  tessera::testing::TempDir dir;
  Job saved = run_worker(4, "hsdp-save*", dir.path().string());
  INFO("mpirun -np 4 (hsdp-save) output:\n", saved.output);
  REQUIRE(saved.status == 0);
  for (int ranks : {1, 3, 4}) {
    Job loaded = run_worker(ranks, "hsdp-load*", dir.path().string());
    INFO("mpirun -np ", ranks, " (hsdp-load) output:\n", loaded.output);
    CHECK(loaded.status == 0);
    MESSAGE(measurements(loaded.output));
  }
}

TEST_CASE("an asynchronous save that fails on one of 2 ranks is reported on both, latest intact") {
  tessera::testing::TempDir dir;
  Job job = run_worker(2, "async-failure*", dir.path().string());
  INFO("mpirun -np 2 (async-failure) output:\n", job.output);
  CHECK(job.status == 0);
}
