// float32 training as close to float64 as PyTorch's: PyTorch's MNIST example network from
// PyTorch's initial weights, 36 steps of SGD (lr 0.05, momentum 0.9) on real MNIST batches
// of 64 without dropout, in float64 and in float32, against the same figures of PyTorch
// 1.13 (tests/optim/data/sgd_drift_golden.safetensors, written by make_drift_golden.py).
//
// Asserted:
//   - the float64 run follows PyTorch's float64 run (1e-9 relative at every step: the same
//     experiment; measured 1e-13);
//   - along the float64 trajectory (float32 loss and gradients at each step's float64
//     parameters rounded to float32: the float32 arithmetic and nothing else), the loss's
//     worst relative error over the 36 steps, and each parameter gradient's median normwise
//     error over the steps, are at most 2x PyTorch's;
//   - free running (the test, the third test case): over 16 orders of the batches,
//     the median of Tessera's float32 drift from float64 divided by PyTorch's on the same
//     order is at most 2.
// Why the median for gradients: now and then a max-pool window holds two values closer
// than float32's rounding (0.071224446 and 0.071224461 at step 5 here), float32 picks the
// other one, and that window's gradient moves to its neighbour: a 1e-4 change of the conv
// gradients at that step. Every float32 implementation has such flips; which windows flip,
// and how much gradient moves, depends on its roundings (PyTorch's worst step here moves
// 3e-6, ours 1e-4). The median over steps measures the arithmetic; the worst step measures
// that lottery, and is printed.
// Measured (2 threads): loss 0.63x PyTorch's worst; gradient medians 0.09x-0.87x PyTorch's
// with the AVX-512 kernels, 0.06x-1.15x with the portable ones (TESSERA_CPU_CAPABILITY=default,
// not rerun in CI: 10 s).
// Printed here, asserted over 16 orders of the batches by the third test case: the
// free-running float32 run's drift from the float64 run. Training at this learning rate is
// chaotic, so one run's drift is a lottery: on these batches PyTorch's own float32 drifts
// 7.9e-5 at 2 threads, 3.5e-4 at 1, 6.5e-2 at 1 with ATEN_CPU_CAPABILITY=avx512, and 5.7e-2
// at 2 threads when one initial weight moves by one float32 ulp (the fourth test case and
// drift_study.py: at step 25 one of conv2's ReLU inputs is within float32's rounding of
// zero, and which side a run's roundings put it on decides 1e-4 or 6e-2). Ours is 6.5e-2.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <tessera/io/safetensors.h>
#include <tessera/tensor/cpu_capability.h>
#include <tessera/tessera.h>

#include "mnist_sgd.h"
#include "test_support.h"

namespace ts = tessera;
namespace optim = tessera::optim;
using namespace mnist_sgd;
using test_support::relative_difference;
using ts::DType;

namespace {

// ||a - b|| / ||b||, in float64.
struct Runs {
  std::vector<double> losses_f64, losses_f32;                // free running
  std::vector<double> step_loss;                             // along the float64 trajectory
  std::vector<std::pair<std::string, std::vector<double>>> step_grads;  // per parameter
};

Runs train() {
  const ts::StateDict weights = initial_weights();
  auto model64 = make_model(weights, DType::f64), model32 = make_model(weights, DType::f32);
  optim::SGD optimizer64(model64->parameters(), kSgd), optimizer32(model32->parameters(), kSgd);
  Runs runs;
  for (const auto& [name, parameter] : model64->named_parameters()) runs.step_grads.push_back({name, {}});
  for (int step = 0; step < kSteps; ++step) {
    // The float32 loss and gradients at this step's float64 parameters.
    auto probe = make_model(model64->state_dict(), DType::f32);
    ts::Tensor probe_loss = ts::nll_loss(probe(images(step, DType::f32)), labels(step));
    probe_loss.backward();

    optimizer64.zero_grad();
    ts::Tensor loss64 = ts::nll_loss(model64(images(step, DType::f64)), labels(step));
    loss64.backward();
    runs.losses_f64.push_back(loss64.item<double>());
    runs.step_loss.push_back(relative(probe_loss.item<double>(), loss64.item<double>()));
    const std::vector<ts::Tensor> grads32 = probe->parameters(), params64 = model64->parameters();
    for (size_t i = 0; i < params64.size(); ++i) {
      runs.step_grads[i].second.push_back(relative_difference(grads32[i].grad(), params64[i].grad()));
    }
    optimizer64.step();

    optimizer32.zero_grad();
    ts::Tensor loss32 = ts::nll_loss(model32(images(step, DType::f32)), labels(step));
    loss32.backward();
    optimizer32.step();
    runs.losses_f32.push_back(loss32.item<double>());
  }
  return runs;
}

}  // namespace

TEST_CASE("float32 SGD on MNIST stays as close to float64 as PyTorch's float32 does") {
  const Runs runs = train();
  const std::vector<double> torch_f64 = golden().at("losses.f64").to_vector<double>();
  const std::vector<double> torch_f32 = golden().at("losses.f32").to_vector<double>();
  REQUIRE(torch_f64.size() == static_cast<size_t>(kSteps));
  // The same experiment: our float64 run is PyTorch's.
  for (int step = 0; step < kSteps; ++step) {
    CAPTURE(step);
    CHECK(relative(runs.losses_f64[step], torch_f64[step]) <= 1e-9);
  }
  std::string table = "\n                 Tessera    PyTorch   (gradients: median over the 36 steps, then the worst)";
  auto row = [&table](const std::string& name, double ours, double theirs) {
    char line[160];
    std::snprintf(line, sizeof line, "\n  %-16s %9.2e  %9.2e  (%.2fx)", name.c_str(), ours, theirs, ours / theirs);
    table += line;
  };

  // Along the float64 trajectory.
  const double loss_error = worst(runs.step_loss), torch_loss_error = worst(golden().at("step.loss").to_vector<double>());
  row("loss (worst)", loss_error, torch_loss_error);
  CHECK(loss_error <= 2 * torch_loss_error);
  for (const auto& [name, errors] : runs.step_grads) {
    CAPTURE(name);
    const std::vector<double> theirs = golden().at("step.grad." + name).to_vector<double>();
    row("d " + name, median(errors), median(theirs));
    CHECK(median(errors) <= 2 * median(theirs));
    row("  worst step", worst(errors), worst(theirs));
  }
  // Free running (printed only, see above).
  row("drift (free)", worst_drift(runs.losses_f32, runs.losses_f64), worst_drift(torch_f32, torch_f64));
  MESSAGE("float32 against float64:", table);
}

// The free-running drift on other windows of the data (make_drift_golden.py --windows N
// --data FILE writes them, and PyTorch's figures): run with TESSERA_DRIFT_WINDOWS=FILE;
// without it (CI) it returns at once.
TEST_CASE("float32 SGD on MNIST: free-running drift on other windows of the data (measurement)") {
  const char* path = std::getenv("TESSERA_DRIFT_WINDOWS");
  if (path == nullptr || *path == '\0') return;
  const ts::StateDict data = ts::io::load(path);
  const ts::StateDict weights = initial_weights();
  const int windows = static_cast<int>(data.at("labels").size(0) / (kSteps * kBatch));
  std::string table = "\nTessera kernels " + std::string(ts::to_string(ts::cpu_capability()));
  for (int window = 0; window < windows; ++window) {
    const std::vector<double> f32 = free_running(weights, data, consecutive(window * kSteps), DType::f32);
    const std::vector<double> f64 = free_running(weights, data, consecutive(window * kSteps), DType::f64);
    int first = -1;
    for (int step = 0; step < kSteps && first < 0; ++step) {
      if (relative(f32[step], f64[step]) > 1e-3) first = step;
    }
    char line[160];
    std::snprintf(line, sizeof line, "\nwindow %d: drift %.3e first step over 1e-3 %d", window,
                  worst_drift(f32, f64), first);
    table += line;
  }
  MESSAGE(table);
}

// The test: Tessera's float32 run against its float64 run, free running over the 36
// steps, drifts at most 2x what PyTorch's float32 drifts from PyTorch's float64, on 16
// orders of the same 36 batches (order 0 as above, orders 1-15 torch.randperm(36) seeded
// 1-15: tests/optim/data/sgd_drift_orders_golden.safetensors, make_drift_golden.py
// --orders 16). PyTorch's drift on an order is the median over six configurations of it
// (ATen kernels NO AVX, AVX2, AVX512, each at 1 and 2 threads: each rounds differently),
// and the assertion is on the median over the orders of Tessera's drift divided by PyTorch's
// on the same order. Why this form: the drift is bimodal, ~1e-6..1e-3 when the run's
// roundings stay on one side of the loss surface's kinks, ~1e-2..3e-1 when they cross one
// (docs/performance.md), and which happens is a lottery per run: PyTorch's own
// configurations' medians over the 16 orders range 2.3e-3..1.9e-2 (8x), so no single
// configuration's median is a reference a 2x bound could be held to. On the same order the
// runs often land in the same mode (10 of the 16 orders land in the same one in all six
// PyTorch configurations), so the ratio is ~1 on many orders and the lottery orders (ratios
// of 1e-4 or 1e+4) fall out of the median, as long as fewer than half of them are lost:
// each PyTorch configuration against the median of the other five gives 0.67-1.00; Tessera
// has 3 (AVX-512 kernels) and 5 (portable) of 16 orders above 2. A kernel whose arithmetic
// were 10x less accurate would drift 10x more on the orders that stay in the low mode and
// cross kinks more often: a ratio near 10. How robust (binomial, from the measured share of
// orders above 2): when a change of Tessera's float32 bits redraws the lottery, this fails
// with odds of about 0.5% at the AVX-512 kernels' 3 of 16 (5% with 8 orders), 9% at the
// portable kernels' 5 of 16 (22% with 8).
// Tessera's float64 is not rerun here: the first test case holds it to PyTorch's float64 at
// 1e-9 (measured 1e-13), far below the float32 drifts measured (1e-6 and up), and the 16
// float64 runs would cost ~4x the float32 ones.
// Measured (2026-12-01, Intel Xeon, all 16 orders): median ratio 0.49 with the AVX-512
// kernels at 2 threads (as CI runs this case, ~15 s on 2 quiet cores), 0.044 at 1 thread;
// the portable kernels (TESSERA_CPU_CAPABILITY=default, and avx2, which runs them too:
// the same bits) 1.08 at 2 threads, 1.07 at 1. Tessera's float32 results are not the same
// bits at 1 and 2 threads (the convolution's weight-gradient sums are per thread), nor on
// the two kernel paths, so each is its own draw. The portable path is not asserted in CI
// (optim-default leaves this case out): its 16 runs take ~28 s.
const ts::StateDict& orders_golden() {
  static const ts::StateDict file = ts::io::load(data_path("sgd_drift_orders_golden.safetensors"));
  return file;
}

TEST_CASE("float32 SGD on MNIST, free running over 16 orders of the batches: drift within 2x PyTorch's") {
  const ts::StateDict& file = orders_golden();
  const ts::StateDict weights = initial_weights();
  const ts::Tensor orders = file.at("orders"), f64 = file.at("f64");
  const int64_t count = orders.size(0);
  std::vector<std::string> configurations;
  for (const auto& [name, value] : file) {
    if (name.rfind("f32.", 0) == 0) configurations.push_back(name);
  }
  REQUIRE(configurations.size() == 6);
  std::vector<double> ours, theirs, ratios;
  std::string table = "\nTessera kernels " + std::string(ts::to_string(ts::cpu_capability())) +
                      "\norder  Tessera  PyTorch (median of 6: min-max)  ratio";
  for (int64_t order = 0; order < count; ++order) {
    const std::vector<double> reference = f64.select(0, order).to_vector<double>();
    const std::vector<double> losses =
        free_running(weights, golden(), orders.select(0, order).to_vector<int64_t>(), DType::f32);
    std::vector<double> torch_drifts;
    for (const std::string& name : configurations) {
      torch_drifts.push_back(worst_drift(file.at(name).select(0, order).to_vector<double>(), reference));
    }
    ours.push_back(worst_drift(losses, reference));
    theirs.push_back(median(torch_drifts));
    ratios.push_back(ours.back() / theirs.back());
    char line[160];
    std::snprintf(line, sizeof line, "\n%5lld  %.2e  %.2e (%.1e-%.1e)  %.3g", static_cast<long long>(order),
                  ours.back(), theirs.back(), *std::min_element(torch_drifts.begin(), torch_drifts.end()),
                  worst(torch_drifts), ratios.back());
    table += line;
  }
  char line[200];
  std::snprintf(line, sizeof line, "\nmedians over the orders: Tessera %.2e, PyTorch %.2e; median ratio %.3g",
                median(ours), median(theirs), median(ratios));
  table += line;
  MESSAGE(table);
  CHECK(median(ratios) <= 2);
}

// Why window 0 drifts 800x PyTorch's (docs/performance.md, "Window 0: chaos, not a
// kernel"; tests/optim/drift_study.py prints PyTorch's side): per step along the float64
// trajectory, the float32 forward's decisions that differ from the float64 forward's (ReLU
// inputs on the other side of zero, 2x2 max-pool windows whose first largest element is
// another) and the worst normwise gradient error; then the free-running drift as is and with
// one weight moved by one float32 ulp. Run with TESSERA_DRIFT_STUDY=1; without it (CI) it
// returns at once.
namespace {

int64_t sign_flips(const ts::Tensor& a32, const ts::Tensor& a64) {
  const std::vector<float> a = a32.contiguous().to_vector<float>();
  const std::vector<double> b = a64.contiguous().to_vector<double>();
  int64_t flips = 0;
  for (size_t i = 0; i < a.size(); ++i) flips += (a[i] > 0) != (b[i] > 0);
  return flips;
}

// The 2x2 max-pool windows of x [N, C, H, W] whose first largest element differs between
// float32 and float64 and is not an exact tie: windows on the images' constant background
// hold four equal values in exact arithmetic, which float32 and float64 order by their last
// bits (Tessera's convolution rounds the same dot product differently at different places
// of its tiles, PyTorch's im2col GEMM does not); which of them the gradient goes to changes
// nothing, since their inputs are the same.
int64_t pool_flips_between(const ts::Tensor& x32, const ts::Tensor& x64) {
  const std::vector<float> a = x32.contiguous().to_vector<float>();
  const std::vector<double> b = x64.contiguous().to_vector<double>();
  const int64_t planes = x64.size(0) * x64.size(1), h = x64.size(2), w = x64.size(3);
  int64_t flips = 0;
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t i = 0; i + 1 < h; i += 2) {
      for (int64_t j = 0; j + 1 < w; j += 2) {
        const int64_t base = (p * h + i) * w + j, at[4] = {base, base + 1, base + w, base + w + 1};
        int64_t choice32 = at[0], choice64 = at[0];
        for (const int64_t k : at) {
          if (a[k] > a[choice32]) choice32 = k;
          if (b[k] > b[choice64]) choice64 = k;
        }
        flips += std::abs(b[choice32] - b[choice64]) > 1e-12 * std::abs(b[choice64]);
      }
    }
  }
  return flips;
}

struct Decisions {
  ts::Tensor a1, a2, a3, relu2;
};

Decisions decisions(mnist::Net& net, const ts::Tensor& x) {
  ts::NoGradGuard no_grad;
  Decisions d;
  d.a1 = net.conv1(x);
  d.a2 = net.conv2(ts::relu(d.a1));
  d.relu2 = ts::relu(d.a2);
  d.a3 = net.fc1(ts::max_pool2d(d.relu2, 2).flatten(1));
  return d;
}

}  // namespace

TEST_CASE("float32 SGD on MNIST: why window 0 drifts (measurement)") {
  const char* study = std::getenv("TESSERA_DRIFT_STUDY");
  if (study == nullptr || *study == '\0') return;
  const ts::StateDict weights = initial_weights();
  std::string table = "\nTessera kernels " + std::string(ts::to_string(ts::cpu_capability())) +
                      "\nstep  relu1 relu2  pool relu3  worst-grad-error";
  auto model64 = make_model(weights, DType::f64);
  optim::SGD optimizer64(model64->parameters(), kSgd);
  for (int step = 0; step < kSteps; ++step) {
    auto probe = make_model(model64->state_dict(), DType::f32);
    const Decisions d32 = decisions(*probe, images(step, DType::f32));
    const Decisions d64 = decisions(*model64, images(step, DType::f32).to(DType::f64));
    const int64_t pool_flips = pool_flips_between(d32.relu2, d64.relu2);
    ts::nll_loss(probe(images(step, DType::f32)), labels(step)).backward();
    optimizer64.zero_grad();
    ts::nll_loss(model64(images(step, DType::f64)), labels(step)).backward();
    double error = 0;
    const std::vector<ts::Tensor> grads32 = probe->parameters(), params64 = model64->parameters();
    for (size_t i = 0; i < params64.size(); ++i) error = std::max(error, relative_difference(grads32[i].grad(), params64[i].grad()));
    optimizer64.step();
    char line[160];
    std::snprintf(line, sizeof line, "\n%4d %6lld %5lld %5lld %5lld  %.2e", step,
                  static_cast<long long>(sign_flips(d32.a1, d64.a1)), static_cast<long long>(sign_flips(d32.a2, d64.a2)),
                  static_cast<long long>(pool_flips), static_cast<long long>(sign_flips(d32.a3, d64.a3)), error);
    table += line;
  }
  const std::vector<double> f64 = free_running(weights, golden(), consecutive(0), DType::f64);
  char line[160];
  std::snprintf(line, sizeof line, "\nfree running, float32 as is: drift %.2e",
                worst_drift(free_running(weights, golden(), consecutive(0), DType::f32), f64));
  table += line;
  // The same weights as drift_study.py's PERTURBED.
  const std::vector<std::pair<std::string, int64_t>> perturbed = {
      {"conv1.weight", 0}, {"conv1.bias", 5}, {"conv2.weight", 1000}, {"conv2.bias", 7},
      {"fc1.weight", 123456}, {"fc1.bias", 3}, {"fc2.weight", 77}, {"fc2.bias", 2}};
  for (const auto& [name, index] : perturbed) {
    ts::StateDict moved;
    for (const auto& [key, value] : weights) moved.insert(key, key == name ? value.to(DType::f32).clone() : value);
    float* element = moved.at(name).data_ptr<float>() + index;
    *element = std::nextafter(*element, std::numeric_limits<float>::infinity());
    std::snprintf(line, sizeof line, "\n  %s[%lld] + 1 ulp: drift %.2e", name.c_str(), static_cast<long long>(index),
                  worst_drift(free_running(moved, golden(), consecutive(0), DType::f32), f64));
    table += line;
  }
  MESSAGE(table);
}
