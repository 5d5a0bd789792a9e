// Tessera's side of the GPT-2 training benchmark (bench/gpt2 runs it beside PyTorch's
// bench/gpt2_torch.py): GPT-2 124M (models::GPT2, preset "gpt2") trained as nanoGPT trains
// it (forward, cross entropy over the batch's tokens, backward, gradient clipping at 1.0,
// AdamW with weight decay on the 2-D weights) on random tokens, float32, dropout 0. Prints
// one JSON line: tokens/s (timed tokens over the time of the timed steps), the median step
// time, the process's peak RSS and the allocator's peak bytes, and with --profile the time
// of the forward, the backward and the optimizer step (clipping included) per step.
//
//   build/bench/gpt2_train --batch 4 --seq-len 64 --threads 2 --steps 5
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <tessera/tessera.h>

#include "command_line.h"
#include "main.h"
#include "measure.h"

namespace ts = tessera;
using bench::Clock;
using bench::median;
using bench::peak_rss_bytes;
using bench::seconds_since;

namespace {

struct Options {
  std::string preset = "gpt2";
  int64_t n_layer = 0;  // 0: the preset's
  int64_t batch = 4, seq_len = 64;
  int threads = 2;
  int64_t steps = 5, warmup = 1;
  bool profile = false;
  bool fsdp = false;
};

constexpr const char* kUsage =
    "usage: gpt2_train [--preset NAME] [--n-layer N] [--batch B] [--seq-len T] [--threads N]\n"
    "                  [--steps N] [--warmup N] [--profile] [--fsdp]\n";

Options parse(int argc, char** argv) {
  Options o;
  example::CommandLine args("gpt2_train", argc, argv, kUsage);
  while (args.next()) {
    if (args.flag() == "--preset") o.preset = args.value();
    else if (args.flag() == "--n-layer") o.n_layer = args.number<int64_t>();
    else if (args.flag() == "--batch") o.batch = args.number<int64_t>();
    else if (args.flag() == "--seq-len") o.seq_len = args.number<int64_t>();
    else if (args.flag() == "--threads") o.threads = args.number<int>();
    else if (args.flag() == "--steps") o.steps = args.number<int64_t>();
    else if (args.flag() == "--warmup") o.warmup = args.number<int64_t>();
    else if (args.flag() == "--profile") o.profile = true;
    else if (args.flag() == "--fsdp") o.fsdp = true;
    else args.unknown();
  }
  if (o.batch < 1 || o.seq_len < 1 || o.threads < 1 || o.steps < 1) args.error("counts must be positive");
  return o;
}

}  // namespace

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  ts::set_num_threads(o.threads);
  ts::models::GPTConfig config = ts::models::GPTConfig::preset(o.preset);
  if (o.n_layer > 0) config.n_layer = o.n_layer;
  ts::models::GPT2 model(config);
  model.reset_parameters(1);
  if (o.fsdp) {
    ts::fsdp::fully_shard(model, ts::dist::init(argc, argv),
                          {.wrap_policy = ts::fsdp::WrapPolicy::module_type({ts::models::kBlockTypeName})});
  }
  std::vector<ts::Tensor> decay, no_decay;
  for (auto& [name, p] : o.fsdp ? ts::fsdp::named_original_parameters(model) : model.named_parameters()) {
    (p.dim() >= 2 ? decay : no_decay).push_back(p);
  }
  ts::optim::AdamW adamw({{decay, {.weight_decay = 0.1}}, {no_decay, {.weight_decay = 0.0}}},
                         {.lr = 6e-4, .betas = {0.9, 0.95}});
  ts::Generator gen(2);
  const int64_t total = o.warmup + o.steps;
  std::vector<ts::Tensor> batches;
  for (int64_t i = 0; i < total; ++i) batches.push_back(ts::randint(0, config.vocab_size, {o.batch, o.seq_len + 1}, gen));

  std::vector<double> step_seconds, forward_ms, backward_ms, optimizer_ms;
  double timed = 0;
  for (int64_t i = 0; i < total; ++i) {
    const auto start = Clock::now();
    ts::Tensor x = batches[i].narrow(1, 0, o.seq_len), y = batches[i].narrow(1, 1, o.seq_len);
    adamw.zero_grad();
    ts::Tensor loss = ts::cross_entropy(model(x).flatten(0, 1), y.flatten());
    const auto forwarded = Clock::now();
    loss.backward();
    const auto backwarded = Clock::now();
    if (o.fsdp) ts::fsdp::clip_grad_norm(model, 1.0);
    else ts::nn::clip_grad_norm(model.parameters(), 1.0);
    adamw.step();
    (void)loss.item<float>();
    const double seconds = seconds_since(start);
    if (i >= o.warmup) {
      timed += seconds;
      step_seconds.push_back(seconds);
      forward_ms.push_back(std::chrono::duration<double, std::milli>(forwarded - start).count());
      backward_ms.push_back(std::chrono::duration<double, std::milli>(backwarded - forwarded).count());
      optimizer_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - backwarded).count());
    }
  }
  const double tokens = static_cast<double>(o.steps * o.batch * o.seq_len);
  std::string profile;
  if (o.profile) {
    char text[128];
    std::snprintf(text, sizeof text, ", \"profile_ms\": {\"forward\": %.3f, \"backward\": %.3f, \"optimizer\": %.3f}",
                  median(forward_ms), median(backward_ms), median(optimizer_ms));
    profile = text;
  }
  std::printf("{\"framework\": \"tessera\", \"batch\": %lld, \"seq_len\": %lld, \"threads\": %d, \"parameters\": %lld, "
              "\"tokens_per_s\": %.2f, \"median_step_s\": %.4f, \"peak_rss_bytes\": %lld, \"peak_allocated_bytes\": %lld, "
              "\"cpu_capability\": \"%s\"%s}\n",
              static_cast<long long>(o.batch), static_cast<long long>(o.seq_len), o.threads,
              static_cast<long long>(config.num_parameters()), tokens / timed, median(step_seconds),
              static_cast<long long>(peak_rss_bytes()),
              static_cast<long long>(ts::memory_stats().peak_bytes),
              std::string(ts::to_string(ts::cpu_capability())).c_str(), profile.c_str());
  return 0;
}

int main(int argc, char** argv) { return example::main_reporting_errors("gpt2_train", argc, argv, run); }
