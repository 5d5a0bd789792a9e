// Tessera's side of the attention benchmark (bench/attention runs it beside
// bench/attention_torch.py): forward and backward of ts::scaled_dot_product_attention on
// random [B, H, T, D] float32 q, k, v, and one JSON line with the median step time,
// samples/s (B over the median step), the peak memory beyond the inputs (process RSS, as
// PyTorch's side measures it, and the allocator's own count) and the attention GFLOP/s
// (the math formulation's 12 B H T^2 D flops per step, halved when causal) and the CPU
// kernels chosen at run time (cpu_capability).
//
//   build/bench/attention_bench --batch 4 --heads 12 --seq 1024 --dim 64 --threads 2 [--causal]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "command_line.h"
#include "main.h"
#include "measure.h"
#include "tessera/tessera.h"

namespace ts = tessera;
using bench::Clock;
using bench::current_rss_bytes;
using bench::peak_rss_bytes;

namespace {

struct Options {
  int64_t batch = 4, heads = 12, seq = 1024, dim = 64;
  int threads = 2;
  int64_t steps = 5, warmup = 1;
  bool causal = false;
};

constexpr const char* kUsage =
    "usage: attention_bench [--batch B] [--heads H] [--seq T] [--dim D] [--threads N] [--steps N]\n"
    "       [--warmup N] [--causal]\n";

Options parse(int argc, char** argv) {
  Options o;
  example::CommandLine args("attention_bench", argc, argv, kUsage);
  while (args.next()) {
    if (args.flag() == "--batch") o.batch = args.number<int64_t>();
    else if (args.flag() == "--heads") o.heads = args.number<int64_t>();
    else if (args.flag() == "--seq") o.seq = args.number<int64_t>();
    else if (args.flag() == "--dim") o.dim = args.number<int64_t>();
    else if (args.flag() == "--threads") o.threads = args.number<int>();
    else if (args.flag() == "--steps") o.steps = args.number<int64_t>();
    else if (args.flag() == "--warmup") o.warmup = args.number<int64_t>();
    else if (args.flag() == "--causal") o.causal = true;
    else args.unknown();
  }
  if (o.batch < 1 || o.heads < 1 || o.seq < 1 || o.dim < 1 || o.threads < 1 || o.steps < 1) {
    args.error("sizes and counts must be positive");
  }
  return o;
}

}  // namespace

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  ts::set_num_threads(o.threads);
  ts::Generator gen(1);
  const ts::Shape shape{o.batch, o.heads, o.seq, o.dim};
  ts::Tensor q = ts::randn(shape, gen).requires_grad_(), k = ts::randn(shape, gen).requires_grad_();
  ts::Tensor v = ts::randn(shape, gen).requires_grad_(), grad_output = ts::randn(shape, gen);
  const int64_t base_rss = current_rss_bytes(), base_allocated = ts::memory_stats().current_bytes;
  ts::reset_peak_memory();
  std::vector<double> step_seconds;
  for (int64_t step = 0; step < o.warmup + o.steps; ++step) {
    for (ts::Tensor* t : {&q, &k, &v}) t->set_grad({});
    const auto start = Clock::now();
    ts::scaled_dot_product_attention(q, k, v, {.is_causal = o.causal}).backward(grad_output);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (step >= o.warmup) step_seconds.push_back(seconds);
  }
  std::sort(step_seconds.begin(), step_seconds.end());
  const double median = step_seconds[step_seconds.size() / 2];
  const double flop = 12.0 * static_cast<double>(o.batch * o.heads) * static_cast<double>(o.seq * o.seq) *
                      static_cast<double>(o.dim) * (o.causal ? 0.5 : 1.0);
  std::printf("{\"framework\": \"tessera\", \"median_step_ms\": %.3f, \"samples_per_s\": %.3f, \"gflops\": %.1f, "
              "\"extra_rss_bytes\": %lld, \"allocator_extra_peak_bytes\": %lld, \"cpu_capability\": \"%s\"}\n",
              median * 1e3, static_cast<double>(o.batch) / median, flop / median / 1e9,
              static_cast<long long>(std::max<int64_t>(0, peak_rss_bytes() - base_rss)),
              static_cast<long long>(ts::memory_stats().peak_bytes - base_allocated),
              std::string(ts::to_string(ts::cpu_capability())).c_str());
  return 0;
}

int main(int argc, char** argv) { return example::main_reporting_errors("attention_bench", argc, argv, run); }
