// The job-level failure guarantees, checked by running misuse_worker under
// `mpirun -np 2` (paths from the MPIRUN and MISUSE_WORKER environment variables):
//   - a collective mismatch in debug mode fails on every rank within 5 s;
//   - a rank that exits, is killed, throws, or returns from main mid-step ends every rank
//     within 10 s;
//   - a correct job whose ranks finish at different times still exits 0.
// The bounds are the requirements, measured from the failure's moment (the
// worker's "event" stamp) to mpirun's exit, so mpirun's start-up time does not count.
// A job still running after 60 s is killed and reported as a hang.
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
#include <vector>

namespace {

struct JobResult {
  bool hung = false;
  bool exited = false;       // by exit(), not a signal
  int status = 0;            // exit code, or the signal number
  std::string output;        // stdout and stderr together
  double seconds_after_event = -1;  // from the latest "event" stamp to mpirun's exit
  double seconds_total = 0;
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t latest_event(const std::string& output) {
  int64_t latest = -1;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    size_t at = line.find("; event ");
    if (at != std::string::npos) latest = std::max<int64_t>(latest, std::stoll(line.substr(at + 8)));
  }
  return latest;
}

JobResult run_job(const std::string& scenario, bool debug) {
  const char* mpirun = std::getenv("MPIRUN");
  const char* worker = std::getenv("MISUSE_WORKER");
  REQUIRE_MESSAGE(mpirun != nullptr, "MPIRUN is not set (meson test sets it)");
  REQUIRE_MESSAGE(worker != nullptr, "MISUSE_WORKER is not set (meson test sets it)");
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
    execl(mpirun, mpirun, "-np", "2", "--oversubscribe", worker, scenario.c_str(), static_cast<char*>(nullptr));
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

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void check_failed_job(const JobResult& job, double bound_seconds) {
  INFO("mpirun output:\n", job.output);
  CHECK_FALSE(job.hung);
  CHECK((!job.exited || job.status != 0));
  CHECK(job.seconds_after_event >= 0);
  CHECK(job.seconds_after_event < bound_seconds);
  CHECK_FALSE(contains(job.output, "finished normally"));
}

}  // namespace

TEST_CASE("debug mode: a collective mismatch fails on every rank within 5 s, naming both calls") {
  JobResult job = run_job("mismatch", true);
  MESSAGE("mismatch: job ended ", job.seconds_after_event, " s after the later rank issued its call (",
          job.seconds_total, " s from launch)");
  check_failed_job(job, 5.0);
  for (std::string rank : {"0", "1"}) {
    std::string line_start = "rank " + rank + " caught: collective mismatch on group 'world'";
    CHECK(contains(job.output, line_start));
  }
  CHECK(contains(job.output, "rank 0: #0 all_gather float32 x 1024; rank 1: #0 all_reduce(sum) float32 x 10"));
}

TEST_CASE("a rank that calls _exit mid-step ends every rank within 10 s") {
  JobResult job = run_job("exit", false);
  MESSAGE("_exit: job ended ", job.seconds_after_event, " s after rank 1 exited (", job.seconds_total,
          " s from launch)");
  check_failed_job(job, 10.0);
  CHECK(contains(job.output, "rank 0: waiting in an all-reduce"));
}

TEST_CASE("a rank killed by SIGKILL mid-step ends every rank within 10 s") {
  JobResult job = run_job("sigkill", false);
  MESSAGE("SIGKILL: job ended ", job.seconds_after_event, " s after rank 1 was killed (", job.seconds_total,
          " s from launch)");
  check_failed_job(job, 10.0);
  CHECK(contains(job.output, "rank 0: waiting in an all-reduce"));
}

TEST_CASE("an uncaught exception on one rank aborts the job within 10 s, naming the rank and the error") {
  JobResult job = run_job("throw", false);
  MESSAGE("uncaught exception: job ended ", job.seconds_after_event, " s after rank 1 threw (", job.seconds_total,
          " s from launch)");
  check_failed_job(job, 10.0);
  CHECK(contains(job.output,
                 "tessera::dist: rank 1 of 2: uncaught exception (std::runtime_error): deliberate failure in step 3"));
  CHECK(contains(job.output, "rank 0: waiting in an all-reduce"));
}

TEST_CASE("a rank that returns from main mid-step ends every rank within 10 s (the exit watch)") {
  JobResult job = run_job("return", false);
  MESSAGE("return from main: job ended ", job.seconds_after_event, " s after rank 1 returned (", job.seconds_total,
          " s from launch)");
  check_failed_job(job, 10.0);
  CHECK(contains(job.output, "tessera::dist: rank 0 of 2: rank 1 exited after issuing 2 collectives on group "
                             "'world', but this rank issued 3: collective #2 can never complete."));
}

TEST_CASE("a collective issued after another rank returned from main is refused, and the job ends") {
  JobResult job = run_job("return_then_issue", false);
  MESSAGE("issue after a rank left: job ended ", job.seconds_after_event, " s after rank 1 returned (",
          job.seconds_total, " s from launch)");
  check_failed_job(job, 10.0);
  CHECK(contains(job.output, "rank 0 of 2: uncaught exception (tessera::dist::DistError): #2 all_reduce(sum) "
                             "float32 x 1000 on group 'world', rank 0: rank 1 has already exited after issuing 2 "
                             "collectives on this group, so this one can never complete"));
}

TEST_CASE("ranks that finish at different times exit 0: the exit watch does not fire on a correct job") {
  JobResult job = run_job("uneven_finish", false);
  INFO("mpirun output:\n", job.output);
  CHECK_FALSE(job.hung);
  CHECK(job.exited);
  CHECK(job.status == 0);
  CHECK(contains(job.output, "rank 0 finished normally"));
}
