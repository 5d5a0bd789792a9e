// Tessera's side of the GEMM benchmark (bench/gemm runs it beside bench/gemm_torch.py): the
// CPU matrix products a Linear layer runs, in float32 and bfloat16, on random operands, and
// one JSON line with each product's median time and GFLOP/s (2 m n k flops) and the CPU
// kernels chosen at run time (cpu_capability). Two forms per shape: `matmul`, x[m, k] @
// w[k, n], and `linear`, ts::linear(x[m, k], w[n, k]) (a Linear layer's stored weight, read
// transposed). bfloat16 operands are made before the timing, as a bfloat16 model holds them.
//
//   build/bench/gemm_bench --shapes 2048x768x3072,2048x768x768 --threads 2 [--reps 10]
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "command_line.h"
#include "main.h"
#include "measure.h"
#include "tessera/tessera.h"

namespace ts = tessera;
using bench::Clock;

namespace {

struct Shape {
  int64_t m, k, n;  // "MxKxN": x[m, k] times a [k, n] weight
};

struct Options {
  std::vector<Shape> shapes{{2048, 768, 3072}, {2048, 768, 768}};
  int threads = 2;
  int reps = 10;
};

constexpr const char* kUsage = "usage: gemm_bench [--shapes MxKxN,...] [--threads N] [--reps N]\n";

std::vector<Shape> parse_shapes(const std::string& text, example::CommandLine& args) {
  std::vector<Shape> shapes;
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) {
    Shape s{};
    char x1 = 0, x2 = 0;
    std::stringstream in(item);
    if (!(in >> s.m >> x1 >> s.k >> x2 >> s.n) || x1 != 'x' || x2 != 'x' || s.m < 1 || s.k < 1 || s.n < 1) {
      args.error("--shapes takes MxKxN,... with positive sizes, got '" + item + "'");
    }
    shapes.push_back(s);
  }
  return shapes;
}

Options parse(int argc, char** argv) {
  Options o;
  example::CommandLine args("gemm_bench", argc, argv, kUsage);
  while (args.next()) {
    if (args.flag() == "--shapes") o.shapes = parse_shapes(args.value(), args);
    else if (args.flag() == "--threads") o.threads = args.number<int>();
    else if (args.flag() == "--reps") o.reps = args.number<int>();
    else args.unknown();
  }
  if (o.threads < 1 || o.reps < 1) args.error("--threads and --reps must be positive");
  return o;
}

// The median seconds of `reps` calls of product(), after one untimed call.
template <class Product>
double median_seconds(int reps, Product&& product) {
  product();
  std::vector<double> seconds;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    product();
    seconds.push_back(bench::seconds_since(start));
  }
  return bench::median(seconds);
}

}  // namespace

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  ts::set_num_threads(o.threads);
  ts::NoGradGuard no_grad;
  ts::Generator gen(1);
  std::string rows;
  for (const Shape& s : o.shapes) {
    const ts::Tensor x = ts::randn({s.m, s.k}, gen), w = ts::randn({s.k, s.n}, gen), wt = ts::randn({s.n, s.k}, gen);
    const double flop = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    for (ts::DType dtype : {ts::DType::f32, ts::DType::bf16}) {
      const ts::Tensor xd = x.to(dtype), wd = w.to(dtype), wtd = wt.to(dtype);
      const double matmul = median_seconds(o.reps, [&] { ts::matmul(xd, wd); });
      const double linear = median_seconds(o.reps, [&] { ts::linear(xd, wtd); });
      for (const auto& [op, seconds] : {std::pair{"matmul", matmul}, std::pair{"linear", linear}}) {
        char row[256];
        std::snprintf(row, sizeof row,
                      "%s{\"op\": \"%s\", \"dtype\": \"%s\", \"m\": %lld, \"k\": %lld, \"n\": %lld, \"ms\": %.3f, "
                      "\"gflops\": %.1f}",
                      rows.empty() ? "" : ", ", op, std::string(ts::dtype_name(dtype)).c_str(),
                      static_cast<long long>(s.m), static_cast<long long>(s.k), static_cast<long long>(s.n),
                      seconds * 1e3, flop / seconds / 1e9);
        rows += row;
      }
    }
  }
  std::printf("{\"framework\": \"tessera\", \"cpu_capability\": \"%s\", \"threads\": %d, \"rows\": [%s]}\n",
              std::string(ts::to_string(ts::cpu_capability())).c_str(), o.threads, rows.c_str());
  return 0;
}

int main(int argc, char** argv) { return example::main_reporting_errors("gemm_bench", argc, argv, run); }
