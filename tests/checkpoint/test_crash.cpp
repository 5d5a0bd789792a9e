// Crash safety: crash_worker saves a checkpoint after every training step; this test kills
// it with SIGKILL after a random delay, 30 times (each run resuming from the last; 20 more
// with asynchronous saves, whose writes run beside the next step's training), and
// after every kill checks that `latest` names a checkpoint that loads, passes every CRC,
// and is consistent (the sums recorded at saving match what was loaded), and that a kill
// left the interrupted save's debris (which the next save cleans up) at least sometimes,
// showing that kills landed mid-save. The delays come from a fixed seed, but where in a
// save each kill lands depends on the machine; the invariant must hold wherever it lands.
#include "checkpoint_test_support.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <random>
#include <thread>

using namespace checkpoint_test;
using ts::testing::TempDir;

namespace {

struct Net : ts::nn::Module {
  ts::nn::Linear fc1{256, 512}, fc2{512, 256};  // as in crash_worker.cpp
  Net() { register_modules({{"fc1", fc1}, {"fc2", fc2}}); }
};

double sum_of(const std::vector<ts::Tensor>& tensors) {
  double total = 0;
  for (const ts::Tensor& t : tensors) total += t.detach().to(ts::DType::f64).sum().item<double>();
  return total;
}

// Starts the worker; returns its pid once it printed "ready" (or -1 after 60 s).
pid_t start_worker(const std::string& root, bool async) {
  const char* worker = std::getenv("CRASH_WORKER");
  REQUIRE_MESSAGE(worker != nullptr, "CRASH_WORKER is not set (meson test sets it)");
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    ::setenv("OMP_NUM_THREADS", "1", 1);
    if (async) {
      ::execl(worker, worker, root.c_str(), "--async", static_cast<char*>(nullptr));
    } else {
      ::execl(worker, worker, root.c_str(), static_cast<char*>(nullptr));
    }
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  std::string seen;
  char c = 0;
  while (seen.find("ready\n") == std::string::npos && ::read(pipe_fds[0], &c, 1) == 1) seen += c;
  ::close(pipe_fds[0]);  // later writes by the worker get SIGPIPE only if it printed again; it does not
  REQUIRE_MESSAGE(seen.find("ready\n") != std::string::npos, "the worker did not start: ", seen);
  return child;
}

// Where in a save a kill landed, judged from what it left in the checkpoint folder.
std::string kill_point(const std::string& root, const std::optional<std::string>& latest) {
  std::string newest;
  for (const std::string& name : entries_of(root)) {
    if (name.rfind(".latest.tmp", 0) == 0) return "writing latest";
    if (name.find(".deleting-") != std::string::npos || name.find(".old-") != std::string::npos) return "pruning";
    if (name.rfind(".step-", 0) == 0) {
      bool rank_file = false, writing_rank_file = false, metadata = false, writing_metadata = false;
      for (const std::string& inner : entries_of(root + "/" + name)) {
        rank_file = rank_file || inner.rfind("rank-", 0) == 0;
        writing_rank_file = writing_rank_file || inner.rfind(".rank-", 0) == 0;
        metadata = metadata || inner == "metadata.json";
        writing_metadata = writing_metadata || inner.rfind(".metadata.json", 0) == 0;
      }
      if (metadata) return "metadata written, before the rename";
      if (writing_metadata) return "writing metadata.json";
      if (rank_file) return "rank file written, before metadata.json";
      if (writing_rank_file) return "writing the rank file";
      return "temporary folder created";
    }
    if (name.rfind("step-", 0) == 0) newest = root + "/" + name;
  }
  if (latest && newest != *latest) return "renamed, before latest moved";
  return "between saves, or pruning done";
}

// `rounds` kills at random moments, each run resuming from the last; after each, `latest`
// must load, verify and be consistent.
void kill_and_check(bool async, int rounds, uint32_t seed) {
  TempDir dir;
  const std::string root = dir.file("checkpoints");
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> delay_ms(0, 250);
  int kills = 0, with_debris = 0, loads = 0;
  uint64_t last_step = 0;
  std::map<std::string, int> kill_points;
  for (int round = 0; round < rounds; ++round) {
    CAPTURE(round);
    pid_t worker = start_worker(root, async);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(random)));
    REQUIRE(::kill(worker, SIGKILL) == 0);
    int status = 0;
    ::waitpid(worker, &status, 0);
    CHECK(WIFSIGNALED(status));
    ++kills;

    bool debris = false;
    for (const std::string& name : entries_of(root)) debris = debris || (name[0] == '.' && name != ".lock");
    if (debris) ++with_debris;

    ckpt::CheckpointManager manager(root);
    std::optional<std::string> latest = manager.latest();
    ++kill_points[kill_point(root, latest)];
    if (!latest) {
      CHECK(last_step == 0);  // only before the first save completed
      continue;
    }
    ckpt::ShardedCheckpoint checkpoint(*latest);
    checkpoint.verify_all();
    Net model;
    ts::fsdp::fully_shard(model, std::make_shared<ts::dist::SingleProcessGroup>());
    ts::optim::Adam adam(model.parameters(), {.lr = 1e-3});
    ckpt::TrainingState state = ckpt::load_sharded(*latest, model, {.optimizer = &adam});
    ++loads;
    std::vector<ts::Tensor> moments;
    for (size_t i = 0; i < adam.params().size(); ++i) moments.push_back(adam.state(i).at("exp_avg"));
    CHECK(state.extra.at("parameter_sum").as_double() == sum_of(model.parameters()));
    CHECK(state.extra.at("exp_avg_sum").as_double() == sum_of(moments));
    CHECK(state.step >= last_step);  // never goes back
    CHECK(*latest == root + "/" + ckpt::CheckpointManager::directory_name(state.step));
    last_step = state.step;
    // keep_last 2, plus at most two more: a save killed before pruning, then the next killed
    // between its rename and moving latest. The save after that prunes back to 2.
    CHECK(manager.checkpoints().size() <= 4);
  }
  std::string where;
  for (const auto& [point, count] : kill_points) where += "\n  " + std::to_string(count) + " x " + point;
  const std::string saves = async ? "asynchronous saves: " : "synchronous saves: ";
  MESSAGE(saves, kills, " kills; ", with_debris, " left an interrupted save's files behind; latest loaded and verified ",
          loads, " times; the last run reached step ", last_step, "; where the kills landed:", where);
  CHECK(with_debris > 0);
  CHECK(last_step > 0);
}

}  // namespace

TEST_CASE("SIGKILL at random points during saves never leaves a latest that fails to load") {
  kill_and_check(false, 30, 20240611);
}

TEST_CASE("SIGKILL at random points during asynchronous saves never leaves a latest that fails to load") {
  kill_and_check(true, 20, 20261204);
}
