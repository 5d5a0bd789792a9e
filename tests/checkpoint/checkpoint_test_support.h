// Shared by the checkpoint tests: a small model with a root parameter (so a root unit
// exists), odd sizes (so shards get padding at 2 to 5 ranks) and an integer buffer; a few
// training steps with Adam and StepLR so that optimizer and scheduler state exist; and
// bitwise comparisons.
#pragma once

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include <tessera/tessera.h>

#include "temp_dir.h"
#include "test_support.h"

namespace checkpoint_test {

namespace ts = tessera;
namespace ckpt = tessera::checkpoint;

struct SmallNet : ts::nn::Module {
  ts::nn::Linear fc1{7, 5}, fc2{5, 3};
  ts::Tensor scale;   // the root's own parameter: the "(root)" unit
  ts::Tensor counts;  // a persistent buffer, int64

  SmallNet() {
    scale = ts::full({3}, 1.5);
    register_parameter("scale", scale);
    counts = ts::zeros({4}, {.dtype = ts::DType::i64});
    register_buffer("counts", counts);
    register_modules({{"fc1", fc1}, {"fc2", fc2}});
  }
  ts::Tensor forward(ts::Tensor x) override { return fc2(ts::relu(fc1(x))) * scale; }
};

// A sharded SmallNet with Adam and StepLR, trained `steps` steps on data only `seed` decides.
struct Trained {
  SmallNet model;
  std::unique_ptr<ts::optim::Adam> adam;
  std::unique_ptr<ts::optim::StepLR> scheduler;

  Trained(const std::shared_ptr<ts::dist::ProcessGroup>& group, int steps, uint64_t seed = 3,
          ts::fsdp::ShardingStrategy strategy = ts::fsdp::ShardingStrategy::full_shard) {
    model.reset_parameters(seed);
    ts::fsdp::fully_shard(model, group, {.strategy = strategy});
    adam = std::make_unique<ts::optim::Adam>(model.parameters(), ts::optim::AdamOptions{.lr = 0.01, .weight_decay = 0.001});
    scheduler = std::make_unique<ts::optim::StepLR>(*adam, 2, 0.5);
    ts::Generator gen(seed + 100);
    for (int step = 0; step < steps; ++step) {
      ts::Tensor x = ts::randn({4, 7}, gen);
      adam->zero_grad();
      model(x).pow(2.0).mean().backward();
      adam->step();
      scheduler->step();
    }
    model.counts.fill_(static_cast<double>(steps));
  }
  ckpt::Stateful with() { return {.optimizer = adam.get(), .scheduler = scheduler.get()}; }
};

// Fills every shard and every optimizer state tensor with NaN, so a value a load misses shows.
inline void poison(Trained& trained) {
  ts::NoGradGuard no_grad;
  for (auto& unit : ts::fsdp::units(trained.model)) unit.shard.detach().fill_(std::numeric_limits<double>::quiet_NaN());
  for (size_t i = 0; i < trained.adam->params().size(); ++i) {
    for (const auto& [name, value] : trained.adam->state(i)) {
      ts::Tensor handle = value;
      handle.fill_(std::numeric_limits<double>::quiet_NaN());
    }
  }
  trained.model.counts.fill_(-1);
}

inline bool same_bits(const ts::Tensor& a, const ts::Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  ts::Tensor ca = a.detach().contiguous(), cb = b.detach().contiguous();
  return a.numel() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// Every entry of two state dicts has the same name, shape, dtype and bits.
inline void check_same(const ts::StateDict& a, const ts::StateDict& b) {
  CHECK(a.keys() == b.keys());
  for (const auto& [name, tensor] : a) {
    CAPTURE(name);
    REQUIRE(b.contains(name));
    CHECK(same_bits(tensor, b.at(name)));
  }
}

// Names in a directory, sorted.
inline std::vector<std::string> entries_of(const std::string& directory) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

using test_support::contains;

// The message of the tessera::Error `action` throws, or "" when it throws none.
template <class F>
std::string error_of(F&& action) {
  try {
    action();
  } catch (const ts::Error& error) {
    return error.what();
  }
  return "";
}

// What `action` returns, run in a forked child (for process-wide settings such as
// setrlimit that must not leak into the test), passed back through a pipe; the child exits
// after it, and the test fails if a signal killed it.
template <class F>
std::string in_forked_child(F&& action) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    const std::string message = action();
    (void)::write(pipe_fds[1], message.data(), message.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string message;
  char buffer[4096];
  for (ssize_t got; (got = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) message.append(buffer, static_cast<size_t>(got));
  ::close(pipe_fds[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK_MESSAGE(!WIFSIGNALED(status), "killed by signal ", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return message;
}

}  // namespace checkpoint_test
