// FSDP on one GPU against the CPU: the MNIST network trained for a few steps (dropout on,
// SGD with momentum) with its shards, gathered buffers and gradients on cuda:0, over the
// one-rank NCCL group and over the single-rank group, must follow the plain CPU run to
// float32 tolerance; bfloat16 mixed precision must follow it to bfloat16 tolerance and
// keep float32 shards, gradients and optimizer state; with CPU offload it must follow the
// run without it, with shards, gradients and optimizer state in pinned host memory (the
// last two cases). (Two ranks sharing the GPU over the MPI group: test_gpu_dist.cpp.)
//
// Tolerances, normwise relative: float32 1e-4 — the op table's per-op bound is 2e-5 and a
// step chains about twenty ops, forward and backward; bfloat16 compute 3e-2 on the loss
// (8-bit mantissa, several layers) and 1e-2 on the parameters (the initial values
// dominate them; only the few updates carry bfloat16 error).
#include <doctest/doctest.h>

#include <cmath>
#include <tessera/tessera.h>

#include "../../examples/mnist_net.h"
#include "gpu_test.h"
#include "test_support.h"

namespace ts = tessera;
namespace fsdp = tessera::fsdp;
using ts::DType;
using ts::Tensor;
using test_support::relative_difference;

namespace {

constexpr int kSteps = 5;
constexpr int64_t kBatch = 16;
constexpr uint64_t kSeed = 21;

struct Trained {
  std::vector<double> losses;
  ts::StateDict state;  // on the CPU
};

// Trains the network on `device`; with a group, sharded over it with `options`.
Trained train(ts::Device device, const std::shared_ptr<ts::dist::ProcessGroup>& group,
              fsdp::FullyShardOptions options = {}) {
  mnist::Net model;
  model.reset_parameters(kSeed);
  model.to(device);
  if (group) fsdp::fully_shard(model, group, options);
  ts::optim::SGD optimizer(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  ts::Generator gen(kSeed);
  Trained trained;
  for (int step = 0; step < kSteps; ++step) {
    Tensor images = ts::randn({kBatch, 1, 28, 28}, gen).to(device);
    Tensor labels = ts::randint(0, 10, {kBatch}, gen).to(device);
    ts::nn::BatchScope scope({.seed = kSeed, .step = static_cast<uint64_t>(step), .first_row = 0});
    optimizer.zero_grad();
    Tensor loss = ts::nll_loss(model(images), labels);
    loss.backward();
    optimizer.step();
    trained.losses.push_back(loss.detach().to(DType::f64).item<double>());
  }
  for (auto& [name, tensor] : model.state_dict()) trained.state.insert(name, tensor.cpu());
  return trained;
}

void check_close(const Trained& actual, const Trained& expected, double loss_tolerance, double parameter_tolerance,
                 const char* what) {
  double worst_loss = 0, worst_parameter = 0;
  for (int step = 0; step < kSteps; ++step) {
    worst_loss = std::max(worst_loss, std::abs(actual.losses[step] - expected.losses[step]) / expected.losses[step]);
  }
  CHECK(actual.state.keys() == expected.state.keys());
  for (auto& [name, tensor] : expected.state) {
    CHECK(actual.state.at(name).dtype() == tensor.dtype());
    worst_parameter = std::max(worst_parameter, relative_difference(actual.state.at(name), tensor));
  }
  MESSAGE(std::string(what), ": worst loss error ", worst_loss, ", worst parameter error ", worst_parameter);
  CHECK(worst_loss <= loss_tolerance);
  CHECK(worst_parameter <= parameter_tolerance);
}

std::shared_ptr<ts::dist::ProcessGroup> nccl_group() {
  if (!ts::dist::nccl_is_compiled()) {
    FAIL_CHECK("this Tessera was built without NCCL: the gpu suite needs it (-Dnccl=enabled)");
    return nullptr;
  }
  ts::dist::GroupOptions options;
  options.device = 0;
  return ts::dist::new_group(ts::dist::init(), ts::dist::Backend::nccl, options);
}

}  // namespace

TEST_CASE("fsdp on cuda: deferred initialisation fills device shards with the CPU's values") {
  if (!gpu_test::cuda_target()) return;
  mnist::Net on_cpu, on_gpu;
  on_cpu.reset_parameters(kSeed);
  on_gpu.reset_parameters(kSeed);
  fsdp::fully_shard(on_gpu, ts::dist::init(), {.device = ts::Device::cuda(0)});  // never used before: still deferred
  for (const fsdp::UnitInfo& unit : fsdp::units(on_gpu)) CHECK(unit.shard.device() == ts::Device::cuda(0));
  ts::StateDict expected = on_cpu.state_dict(), actual = on_gpu.state_dict();
  CHECK(actual.keys() == expected.keys());
  for (auto& [name, tensor] : expected) {
    CHECK(actual.at(name).device() == ts::Device::cuda(0));
    CHECK_MESSAGE(actual.at(name).cpu().to_vector<float>() == tensor.to_vector<float>(), name);
  }
}

TEST_CASE("fsdp on cuda with NCCL at one rank follows the CPU run") {
  if (!gpu_test::cuda_target()) return;
  auto group = nccl_group();
  if (!group) return;
  Trained cpu = train(ts::Device::cpu(), nullptr);
  Trained gpu = train(ts::Device::cuda(0), group, {.gradient_reduction = ts::dist::ReduceOp::avg});
  check_close(gpu, cpu, 1e-4, 1e-4, "NCCL FSDP vs CPU");
  // Without prefetch and with SHARD_GRAD_OP the schedule differs, not the result.
  Trained plain = train(ts::Device::cuda(0), group, {.strategy = fsdp::ShardingStrategy::shard_grad_op, .prefetch = false});
  check_close(plain, cpu, 1e-4, 1e-4, "NCCL FSDP (SHARD_GRAD_OP, no prefetch) vs CPU");
}

TEST_CASE("fsdp on cuda with NCCL: gradient reductions have a group (and stream) of their own") {
  if (!gpu_test::cuda_target()) return;
  auto group = nccl_group();
  if (!group) return;
  mnist::Net model;
  model.reset_parameters(kSeed);
  model.to(ts::Device::cuda(0));
  fsdp::fully_shard(model, group);
  const uint64_t before = group->next_sequence();
  ts::Generator gen(kSeed);
  Tensor images = ts::randn({kBatch, 1, 28, 28}, gen).to(ts::Device::cuda(0));
  ts::nll_loss(model(images), ts::randint(0, 10, {kBatch}, gen).to(ts::Device::cuda(0))).backward();
  const fsdp::MemoryReport report = fsdp::memory_report(model);
  CHECK(report.reduce_scatters > 0);
  // The user's group carried the all-gathers only: a prefetched gather never waits behind a reduction.
  CHECK(group->next_sequence() - before == static_cast<uint64_t>(report.all_gathers));
}

TEST_CASE("fsdp on cuda over the single-rank group follows the CPU run, and keeps nothing on the host") {
  if (!gpu_test::cuda_target()) return;
  Trained cpu = train(ts::Device::cpu(), nullptr);
  const int64_t host_before = ts::memory_stats(ts::Device::cpu()).current_bytes;
  mnist::Net model;
  model.reset_parameters(kSeed);
  model.to(ts::Device::cuda(0));
  fsdp::fully_shard(model, ts::dist::init());
  for (const fsdp::UnitInfo& unit : fsdp::units(model)) CHECK(unit.shard.device() == ts::Device::cuda(0));
  CHECK(ts::memory_stats(ts::Device::cpu()).current_bytes - host_before < 64 * 1024);  // no host copies of the model
  Trained gpu = train(ts::Device::cuda(0), ts::dist::init());
  check_close(gpu, cpu, 1e-4, 1e-4, "single-group FSDP on cuda vs CPU");
}

TEST_CASE("fsdp on cuda: bfloat16 mixed precision keeps float32 shards and follows the float32 run") {
  if (!gpu_test::cuda_target()) return;
  auto group = nccl_group();
  if (!group) return;
  const fsdp::MixedPrecision policy{.param_dtype = DType::bf16, .reduce_dtype = DType::f32, .output_dtype = DType::f32};
  Trained cpu = train(ts::Device::cpu(), nullptr);
  Trained mixed = train(ts::Device::cuda(0), group, {.mixed_precision = policy});
  check_close(mixed, cpu, 3e-2, 1e-2, "bfloat16 FSDP on cuda vs float32 CPU");

  // The mechanics: float32 shards, gradients and optimizer state; bfloat16 parameters and compute.
  mnist::Net model;
  model.to(ts::Device::cuda(0));
  fsdp::fully_shard(model, group, {.mixed_precision = policy});
  ts::optim::Adam optimizer(model.parameters(), {.lr = 1e-3});
  ts::Generator gen(4);
  Tensor images = ts::randn({4, 1, 28, 28}, gen).to(ts::Device::cuda(0));
  Tensor output = model(images);
  CHECK(output.dtype() == DType::f32);            // output_dtype
  CHECK(model.fc2.weight.dtype() == DType::bf16);  // a view of the gathered bfloat16 buffer
  ts::nll_loss(output, ts::randint(0, 10, {4}, gen).to(ts::Device::cuda(0))).backward();
  optimizer.step();
  for (const fsdp::UnitInfo& unit : fsdp::units(model)) {
    CHECK(unit.shard.dtype() == DType::f32);
    CHECK(unit.shard.grad().dtype() == DType::f32);
  }
  CHECK(optimizer.state(0).at("exp_avg").dtype() == DType::f32);
  CHECK(model.state_dict().at("fc1.weight").dtype() == DType::f32);
  // The gathered buffers are half the size of float32 ones.
  fsdp::MemoryReport report = fsdp::memory_report(model);
  CHECK(report.peak_unsharded_parameter_bytes <= report.largest_unit_bytes);
}

TEST_CASE("fsdp on cuda: a CPU model on an NCCL group is refused with the remedy") {
  if (!gpu_test::cuda_target()) return;
  auto group = nccl_group();
  if (!group) return;
  mnist::Net model;
  std::string message;
  try {
    fsdp::fully_shard(model, group);
  } catch (const ts::DeviceError& error) {
    message = error.what();
  }
  CHECK(message.find("is on cpu but the NCCL group") != std::string::npos);
  CHECK(message.find("call model.to(cuda:0) first") != std::string::npos);
}

// CPU offload (fsdp::CPUOffloadPolicy) on the device against the same run without it. The
// forward, backward and reductions are the same kernels on the same values; only the
// optimizer's step moves from the CUDA kernel to the CPU one (the same update_rules.h
// arithmetic, but nvcc contracts multiply-adds into FMAs where the CPU build does not), so
// float32 results agree to a few units in the last place per step: 1e-5 normwise over the
// five steps. With bfloat16 compute such a last-place difference in a float32 master value
// can round its bfloat16 copy the other way: 1e-2 on the loss, 1e-3 on the parameters.
// With the CPU standing in (the harness check) the runs are bit-identical.
namespace {

std::shared_ptr<ts::dist::ProcessGroup> offload_test_group() {
  return gpu_test::cuda_target() ? nccl_group() : ts::dist::init();
}

}  // namespace

TEST_CASE("fsdp on cuda with cpu offload follows the run without it") {
  auto group = offload_test_group();
  if (!group) return;
  const ts::Device device = gpu_test::target();
  const fsdp::CPUOffloadPolicy offload{};
  Trained plain = train(device, group);
  Trained offloaded = train(device, group, {.offload_policy = offload});
  check_close(offloaded, plain, 1e-5, 1e-5, "FSDP with CPU offload vs without");
  Trained pageable = train(device, group, {.offload_policy = fsdp::CPUOffloadPolicy{.pin_memory = false}});
  check_close(pageable, plain, 1e-5, 1e-5, "FSDP with CPU offload to pageable memory vs without");
  if (gpu_test::cuda_target()) {
    const fsdp::MixedPrecision policy{.param_dtype = DType::bf16, .reduce_dtype = DType::f32, .output_dtype = DType::f32};
    Trained mixed = train(device, group, {.mixed_precision = policy});
    Trained mixed_offloaded = train(device, group, {.mixed_precision = policy, .offload_policy = offload});
    check_close(mixed_offloaded, mixed, 1e-2, 1e-3, "bfloat16 FSDP with CPU offload vs without");
  }
}

TEST_CASE("fsdp on cuda with cpu offload: shards, gradients and optimizer state in pinned host memory") {
  auto group = offload_test_group();
  if (!group) return;
  const ts::Device device = gpu_test::target();
  // The device's peak over a training step and what pinned memory holds after it.
  struct Measured {
    int64_t device_peak = 0, pinned = 0, shards = 0;
  };
  auto measure = [&](std::optional<fsdp::CPUOffloadPolicy> offload) {
    const int64_t device_start = ts::memory_stats(device).current_bytes;
    const int64_t pinned_start = ts::pinned_memory_stats().current_bytes;
    mnist::Net model;
    model.reset_parameters(kSeed);
    model.to(device);
    fsdp::fully_shard(model, group, {.offload_policy = offload});
    Measured measured;
    for (const fsdp::UnitInfo& unit : fsdp::units(model)) {
      CHECK(unit.shard.is_pinned() == offload.has_value());
      CHECK(unit.shard.device() == (offload ? ts::Device::cpu() : device));
      measured.shards += static_cast<int64_t>(unit.shard.nbytes());
    }
    if (offload && device.is_cuda()) {
      CHECK(ts::memory_stats(device).current_bytes - device_start < 64 * 1024);  // nothing of the model on the device
    }
    ts::optim::Adam optimizer(model.parameters(), {.lr = 1e-3});
    ts::Generator gen(kSeed);
    ts::reset_peak_memory(device);
    for (int step = 0; step < 2; ++step) {
      optimizer.zero_grad();
      Tensor images = ts::randn({kBatch, 1, 28, 28}, gen).to(device);
      Tensor labels = ts::randint(0, 10, {kBatch}, gen).to(device);
      ts::nn::BatchScope scope({.seed = kSeed, .step = static_cast<uint64_t>(step), .first_row = 0});
      ts::nll_loss(model(images), labels).backward();
      CHECK(std::isfinite(fsdp::clip_grad_norm(model, 1.0)));
      optimizer.step();
    }
    for (const fsdp::UnitInfo& unit : fsdp::units(model)) CHECK(unit.shard.grad().is_pinned() == offload.has_value());
    CHECK(optimizer.state(0).at("exp_avg").is_pinned() == offload.has_value());
    measured.device_peak = ts::memory_stats(device).peak_bytes - device_start;
    measured.pinned = ts::pinned_memory_stats().current_bytes - pinned_start;
    return measured;
  };
  const Measured plain = measure(std::nullopt), offloaded = measure(fsdp::CPUOffloadPolicy{});
  MESSAGE("device peak over two Adam steps: ", plain.device_peak, " bytes without offload, ", offloaded.device_peak,
          " with; pinned: ", offloaded.pinned, " bytes (shards ", offloaded.shards, ")");
  CHECK(plain.pinned == 0);
  CHECK(offloaded.pinned == 4 * offloaded.shards);  // shards, gradient shards, Adam's two states
  // The device no longer holds those four. At one rank the plain run keeps no gathered copy
  // (its shard is the gathered buffer), while the offloaded run puts up to three unsharded
  // copies on the device: the shard's device copy for the all-gather, the gathered
  // parameters and their unsharded gradient (fc1 is 97% of this network). So the peak drops
  // by at least 4 - 3 = 1 shard; with the CPU standing in, by 1.02 shards.
  CHECK(plain.device_peak - offloaded.device_peak >= offloaded.shards);
}
