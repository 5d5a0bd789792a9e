// How long training stands still per checkpoint: synchronous saves against asynchronous
// ones (CheckpointManagerOptions::async_save), on GPT-2 (models::GPT2, a preset, optionally
// fewer layers) sharded with FSDP over the ranks it is started with, AdamW, random tokens,
// float32, dropout 0. In one process, so that all phases see the same machine:
//
//   1. `--steps` steps without checkpoints: the median step time;
//   2. `--saves` synchronous saves, one every `--every` steps: the time save() takes;
//   3. the same with asynchronous saves, polled after every step as the examples do: the
//      time save() takes (staging, plus any wait for the save before), how long the write
//      then ran in the background, and how much slower the steps during it were than
//      phase 1's median (the writer shares the CPU with training).
//
// Prints one JSON line (rank 0). Figures per save are medians over the saves; blocking is
// also given as a percentage of the median step.
//
//   build/bench/checkpoint_async --preset gpt2 --batch 4 --seq-len 64 --threads 2 --dir /tmp/ckpt-bench
//   mpirun -np 2 build/bench/checkpoint_async --threads 1 ...
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <tessera/tessera.h>

#include "command_line.h"
#include "main.h"
#include "measure.h"

namespace ts = tessera;
using bench::Clock;
using bench::median;
using bench::seconds_since;

namespace {

struct Options {
  std::string preset = "gpt2";
  int64_t n_layer = 0;  // 0: the preset's
  int64_t batch = 4, seq_len = 64;
  int threads = 2;
  int64_t steps = 4, saves = 3, every = 4;
  std::string dir = "/tmp/tessera-checkpoint-bench";
};

constexpr const char* kUsage =
    "usage: checkpoint_async [--preset NAME] [--n-layer N] [--batch B] [--seq-len T] [--threads N]\n"
    "                        [--steps N] [--saves N] [--every N] [--dir DIR]\n";

Options parse(int argc, char** argv) {
  Options o;
  example::CommandLine args("checkpoint_async", argc, argv, kUsage);
  while (args.next()) {
    if (args.flag() == "--preset") o.preset = args.value();
    else if (args.flag() == "--n-layer") o.n_layer = args.number<int64_t>();
    else if (args.flag() == "--batch") o.batch = args.number<int64_t>();
    else if (args.flag() == "--seq-len") o.seq_len = args.number<int64_t>();
    else if (args.flag() == "--threads") o.threads = args.number<int>();
    else if (args.flag() == "--steps") o.steps = args.number<int64_t>();
    else if (args.flag() == "--saves") o.saves = args.number<int64_t>();
    else if (args.flag() == "--every") o.every = args.number<int64_t>();
    else if (args.flag() == "--dir") o.dir = args.value();
    else args.unknown();
  }
  if (o.batch < 1 || o.seq_len < 1 || o.threads < 1 || o.steps < 1 || o.saves < 1 || o.every < 1) {
    args.error("counts must be positive");
  }
  return o;
}

struct Trainer {
  ts::models::GPT2& model;
  ts::optim::AdamW& optimizer;
  ts::dist::ProcessGroup& world;
  const Options& o;
  ts::Generator gen{2};
  uint64_t step = 0;

  // One step; returns its seconds (the ranks' slowest decides: the loss is all-reduced).
  double train_step() {
    const auto start = Clock::now();
    ts::Tensor tokens = ts::randint(0, model.config().vocab_size, {o.batch, o.seq_len + 1}, gen);
    optimizer.zero_grad();
    ts::Tensor loss = ts::cross_entropy(model(tokens.narrow(1, 0, o.seq_len)).flatten(0, 1),
                                        tokens.narrow(1, 1, o.seq_len).flatten());
    loss.backward();
    ts::fsdp::clip_grad_norm(model, 1.0);
    optimizer.step();
    ts::Tensor global = loss.detach().reshape({1}).contiguous();
    world.all_reduce(global);
    ++step;
    return seconds_since(start);
  }
};

struct Phase {
  std::vector<double> blocked_ms;     // save()'s time, per save
  std::vector<double> background_s;   // asynchronous: from save() returning to the write being done
  std::vector<double> slower_ms;      // asynchronous: the steps during the write, over the median step
};

Phase run_saves(Trainer& trainer, bool async, double median_step_s) {
  const std::string root = trainer.o.dir + (async ? "/async" : "/sync");
  if (trainer.world.rank() == 0) std::filesystem::remove_all(root);
  trainer.world.barrier();
  Phase phase;
  {
    ts::checkpoint::CheckpointManager manager(root, {.keep_last = 1, .async_save = async});
    ts::checkpoint::Stateful with{.optimizer = &trainer.optimizer};
    for (int64_t save = 0; save < trainer.o.saves; ++save) {
      trainer.world.barrier();
      const auto start = Clock::now();
      manager.save(trainer.model, with, {.step = trainer.step});
      trainer.world.barrier();  // every rank's save() returned
      phase.blocked_ms.push_back(1000 * seconds_since(start));
      const auto written_from = Clock::now();
      double slower = 0;
      bool in_flight = async;
      for (int64_t s = 0; s < trainer.o.every; ++s) {
        const double seconds = trainer.train_step();
        if (in_flight) {
          slower += 1000 * (seconds - median_step_s);
          in_flight = manager.poll();
          if (!in_flight) phase.background_s.push_back(seconds_since(written_from));
        }
      }
      if (in_flight) {  // still writing after `every` steps: the next save() waits for it
        manager.wait();
        phase.background_s.push_back(seconds_since(written_from));
      }
      if (async) phase.slower_ms.push_back(slower);
    }
    manager.wait();
  }
  if (trainer.world.rank() == 0) std::filesystem::remove_all(root);
  return phase;
}

}  // namespace

int run(int argc, char** argv) {
  auto world = ts::dist::init(argc, argv);
  const Options o = parse(argc, argv);
  ts::set_num_threads(o.threads);
  ts::models::GPTConfig config = ts::models::GPTConfig::preset(o.preset);
  if (o.n_layer > 0) config.n_layer = o.n_layer;
  config.dropout = 0;
  ts::models::GPT2 model(config);
  model.reset_parameters(1);
  ts::fsdp::fully_shard(model, world, {.wrap_policy = ts::fsdp::WrapPolicy::module_type({ts::models::kBlockTypeName})});
  std::vector<ts::Tensor> decay, no_decay;
  for (auto& [name, p] : ts::fsdp::named_original_parameters(model)) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  ts::optim::AdamW adamw({{decay, {.weight_decay = 0.1}}, {no_decay, {.weight_decay = 0.0}}},
                         {.lr = 6e-4, .betas = {0.9, 0.95}});
  Trainer trainer{model, adamw, *world, o};

  trainer.train_step();  // warm-up: Adam's state exists from here on
  std::vector<double> steps;
  for (int64_t s = 0; s < o.steps; ++s) steps.push_back(trainer.train_step());
  const double step_s = median(steps);
  const Phase sync = run_saves(trainer, false, step_s);
  const Phase async = run_saves(trainer, true, step_s);

  ts::checkpoint::CheckpointManager probe(o.dir + "/probe", {.async_save = true});
  int64_t staged_bytes = 0;
  {
    // The staged copy's size on this rank (the largest rank's is what a memory limit must allow).
    probe.save(model, {.optimizer = &adamw}, {.step = trainer.step});
    probe.wait();
    staged_bytes = probe.staging_bytes();
  }
  if (world->rank() == 0) {
    std::filesystem::remove_all(o.dir + "/probe");
    const double sync_ms = median(sync.blocked_ms), async_ms = median(async.blocked_ms);
    std::printf("{\"preset\": \"%s\", \"n_layer\": %lld, \"parameters\": %lld, \"ranks\": %d, \"threads\": %d, "
                "\"batch\": %lld, \"seq_len\": %lld, \"step_ms\": %.1f, \"staged_bytes_rank0\": %lld, "
                "\"sync_blocked_ms\": %.1f, \"async_blocked_ms\": %.1f, \"sync_blocked_pct_of_step\": %.1f, "
                "\"async_blocked_pct_of_step\": %.1f, \"async_background_s\": %.2f, "
                "\"async_slower_steps_ms\": %.1f, \"saves\": %lld, \"cpu_capability\": \"%s\"}\n",
                o.preset.c_str(), static_cast<long long>(config.n_layer), static_cast<long long>(config.num_parameters()),
                world->size(), o.threads, static_cast<long long>(o.batch), static_cast<long long>(o.seq_len),
                1000 * step_s, static_cast<long long>(staged_bytes), sync_ms, async_ms, 100 * sync_ms / (1000 * step_s),
                100 * async_ms / (1000 * step_s), median(async.background_s), median(async.slower_ms),
                static_cast<long long>(o.saves), std::string(ts::to_string(ts::cpu_capability())).c_str());
  }
  return 0;
}

int main(int argc, char** argv) { return example::main_reporting_errors("checkpoint_async", argc, argv, run); }
