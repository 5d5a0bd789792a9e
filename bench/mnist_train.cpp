// Tessera's side of the MNIST training benchmark (bench/run runs it beside PyTorch's).
//
// Trains examples/mnist_net.h (PyTorch's MNIST example network) the way PyTorch's example
// loop does (zero_grad, forward, nll_loss, backward, step) with SGD on random data in
// train mode (dropout on), and prints one JSON line: samples/s (timed samples over the
// time of the timed steps; also the batch over the median step time, which a busy moment
// of a shared machine moves less), peak memory, the fp32
// GEMM rate of Tessera's own GEMM at the same thread count (the roofline), and with
// --profile the time of each layer's forward and backward.
//
//   build/bench/mnist_train --batch 64 --threads 2
//
// The backward profile needs no support from the library: a gradient hook on each
// layer's output fires just before that layer's backward node runs, so the time between
// consecutive hooks is one node's backward (the engine's bookkeeping included).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "command_line.h"
#include "main.h"
#include "measure.h"
#include "mnist_net.h"
#include "tessera/dist/dist.h"
#include "tessera/fsdp/fsdp.h"
#include "tessera/optim/optim.h"
#include "tessera/tensor/cpu_capability.h"

namespace ts = tessera;
using bench::Clock;
using bench::current_rss_bytes;
using bench::peak_rss_bytes;
using bench::seconds_since;

namespace {

struct Options {
  int64_t batch = 64;
  int threads = 2;
  int64_t steps = 40;
  int64_t warmup = 5;
  double momentum = 0.9;
  double gemm_seconds = 1.0;
  bool profile = false;
  bool fsdp = false;
};

constexpr const char* kUsage =
    "usage: mnist_train [--batch N] [--threads N] [--steps N] [--warmup N]\n"
    "                   [--momentum X] [--gemm-seconds X] [--profile] [--fsdp]\n";

Options parse(int argc, char** argv) {
  Options o;
  example::CommandLine args("mnist_train", argc, argv, kUsage);
  while (args.next()) {
    if (args.flag() == "--batch") o.batch = args.number<int64_t>();
    else if (args.flag() == "--threads") o.threads = args.number<int>();
    else if (args.flag() == "--steps") o.steps = args.number<int64_t>();
    else if (args.flag() == "--warmup") o.warmup = args.number<int64_t>();
    else if (args.flag() == "--momentum") o.momentum = args.number<double>();
    else if (args.flag() == "--gemm-seconds") o.gemm_seconds = args.number<double>();
    else if (args.flag() == "--profile") o.profile = true;
    else if (args.flag() == "--fsdp") o.fsdp = true;
    else args.unknown();
  }
  if (o.batch < 1 || o.threads < 1 || o.steps < 1) args.error("counts must be positive");
  return o;
}

// The best fp32 GEMM rate (GFLOP/s) of ts::matmul on size x size matrices.
double gemm_gflops(int64_t size, double seconds) {
  ts::NoGradGuard no_grad;
  ts::Generator gen(7);
  ts::Tensor a = ts::randn({size, size}, gen), b = ts::randn({size, size}, gen);
  ts::Tensor c = a.matmul(b);
  double best = 0;
  auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    auto start = Clock::now();
    c = a.matmul(b);
    best = std::max(best, 2.0 * size * size * size / seconds_since(start) / 1e9);
  }
  return best;
}

struct Batch {
  ts::Tensor data, target;
};

// Per-layer times: each row's ms per step, the median over the profiled steps.
class LayerProfile {
 public:
  void add(const std::string& row, double seconds) { step_ms_[row] += seconds * 1e3; }
  void end_step() {
    for (const auto& [row, ms] : step_ms_) ms_[row].push_back(ms);
    step_ms_.clear();
  }

  // Runs fn, charging its time to `row`.
  template <class Fn>
  ts::Tensor forward(const std::string& row, Fn&& fn) {
    auto start = Clock::now();
    ts::Tensor out = fn();
    add(row + " fwd", seconds_since(start));
    return out;
  }

  // Marks `t`'s backward node as belonging to `row`: its hook fires just before the node runs.
  void mark_backward(ts::Tensor& t, const std::string& row) {
    t.register_hook([this, row](const ts::Tensor&) {
      switch_to(row + " bwd");
      return ts::Tensor();
    });
  }

  void switch_to(const std::string& row) {
    auto now = Clock::now();
    if (!current_.empty()) add(current_, std::chrono::duration<double>(now - since_).count());
    current_ = row;
    since_ = now;
  }
  void stop() { switch_to(""); }

  std::string json() const {
    std::string out = "{";
    for (auto [row, ms] : ms_) {
      if (out.size() > 1) out += ", ";
      std::sort(ms.begin(), ms.end());
      char field[128];
      std::snprintf(field, sizeof field, "\"%s\": %.4f", row.c_str(), ms[ms.size() / 2]);
      out += field;
    }
    return out + "}";
  }

 private:
  std::map<std::string, double> step_ms_;
  std::map<std::string, std::vector<double>> ms_;
  std::string current_;
  Clock::time_point since_;
};

// One training step with every layer timed; the same ops as mnist::Net::forward.
void profiled_step(mnist::Net& m, ts::optim::Optimizer& optimizer, const Batch& batch, LayerProfile& profile) {
  auto start = Clock::now();
  optimizer.zero_grad();
  profile.add("zero_grad", seconds_since(start));
  ts::Tensor x = batch.data;
  x = profile.forward("conv1+relu", [&] { return ts::relu(m.conv1(x)); });
  profile.mark_backward(x, "conv1+relu");  // ReluBackward, then Conv2dBackward
  ts::Tensor conv2 = profile.forward("conv2+relu", [&] { return ts::relu(m.conv2(x)); });
  profile.mark_backward(conv2, "conv2+relu");
  ts::Tensor pooled = profile.forward("pool", [&] { return ts::max_pool2d(conv2, 2); });
  profile.mark_backward(pooled, "pool");
  ts::Tensor dropped1 = profile.forward("dropout1", [&] { return m.dropout1(pooled); });
  profile.mark_backward(dropped1, "dropout1");
  ts::Tensor fc1 = profile.forward("fc1+relu", [&] { return ts::relu(m.fc1(dropped1.flatten(1))); });
  profile.mark_backward(fc1, "fc1+relu");
  ts::Tensor dropped2 = profile.forward("dropout2", [&] { return m.dropout2(fc1); });
  profile.mark_backward(dropped2, "dropout2");
  ts::Tensor output = profile.forward("fc2+log_softmax", [&] { return ts::log_softmax(m.fc2(dropped2), 1); });
  profile.mark_backward(output, "fc2+log_softmax");
  ts::Tensor loss = profile.forward("loss", [&] { return ts::nll_loss(output, batch.target); });
  profile.mark_backward(loss, "loss");
  for (ts::Tensor& p : m.parameters()) profile.mark_backward(p, "accumulate grad");
  profile.switch_to("loss bwd");
  loss.backward();
  profile.stop();
  start = Clock::now();
  optimizer.step();
  profile.add("optimizer step", seconds_since(start));
  profile.end_step();
}

}  // namespace

int run(int argc, char** argv) {
  Options options = parse(argc, argv);
  ts::set_num_threads(options.threads);

  mnist::Net model;
  model.reset_parameters(1);
  if (options.fsdp) ts::fsdp::fully_shard(model, ts::dist::init());
  model.train();
  ts::optim::SGD optimizer(model.parameters(), {.lr = 0.01, .momentum = options.momentum});
  // A few fixed random batches, made before timing (the data pipeline is not measured).
  ts::Generator gen(1);
  std::vector<Batch> batches;
  for (int i = 0; i < 4; ++i) {
    batches.push_back({ts::randn({options.batch, 1, 28, 28}, gen), ts::randint(0, 10, {options.batch}, gen)});
  }

  uint64_t step_index = 0;
  auto step = [&](const Batch& batch) {
    ts::nn::BatchScope scope({.seed = 1, .step = step_index++, .first_row = 0});
    optimizer.zero_grad();
    ts::Tensor output = model(batch.data);
    ts::Tensor loss = ts::nll_loss(output, batch.target);
    loss.backward();
    optimizer.step();
    return loss;
  };

  const int64_t base_rss = current_rss_bytes();
  for (int64_t i = 0; i < options.warmup; ++i) step(batches[i % batches.size()]);
  ts::reset_peak_memory();
  const int64_t allocations_before = ts::memory_stats().allocations;
  ts::Tensor loss;
  std::vector<double> step_seconds;
  auto start = Clock::now();
  for (int64_t i = 0; i < options.steps; ++i) {
    auto step_start = Clock::now();
    loss = step(batches[i % batches.size()]);
    step_seconds.push_back(seconds_since(step_start));
  }
  const double seconds = seconds_since(start);
  std::sort(step_seconds.begin(), step_seconds.end());
  const double median_step = step_seconds[step_seconds.size() / 2];
  const ts::MemoryStats stats = ts::memory_stats();
  const int64_t peak_rss = peak_rss_bytes();

  std::printf("{\"framework\": \"tessera\", \"cpu_capability\": \"%s\", \"batch\": %lld, \"threads\": %d, \"fsdp\": %s, \"steps\": %lld, "
              "\"samples_per_s\": %.3f, \"samples_per_s_median_step\": %.3f, \"median_step_ms\": %.4f, "
              "\"loss\": %.6f, "
              "\"peak_rss_bytes\": %lld, "
              "\"training_rss_bytes\": %lld, \"allocator_peak_bytes\": %lld, \"allocations_per_step\": %.2f",
              std::string(ts::to_string(ts::cpu_capability())).c_str(), static_cast<long long>(options.batch),
              ts::get_num_threads(), options.fsdp ? "true" : "false",
              static_cast<long long>(options.steps), static_cast<double>(options.steps * options.batch) / seconds,
              static_cast<double>(options.batch) / median_step, median_step * 1e3, loss.item<double>(), static_cast<long long>(peak_rss),
              static_cast<long long>(std::max<int64_t>(0, peak_rss - base_rss)),
              static_cast<long long>(stats.peak_bytes),
              static_cast<double>(stats.allocations - allocations_before) / static_cast<double>(options.steps));
  if (options.gemm_seconds > 0) std::printf(", \"gemm_gflops\": %.3f", gemm_gflops(2048, options.gemm_seconds));
  if (options.profile) {
    LayerProfile profile;
    const int64_t profiled_steps = 21;
    for (int64_t i = 0; i < profiled_steps; ++i) {
      ts::nn::BatchScope scope({.seed = 1, .step = step_index++, .first_row = 0});
      profiled_step(model, optimizer, batches[i % batches.size()], profile);
    }
    std::printf(", \"layers_ms\": %s", profile.json().c_str());
  }
  std::printf("}\n");
  return 0;
}

int main(int argc, char** argv) { return example::main_reporting_errors("mnist_train", argc, argv, run); }
