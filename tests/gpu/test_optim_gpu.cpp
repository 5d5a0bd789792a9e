// The fused optimizer updates on CUDA against the CPU: every optimizer and option that
// changes the arithmetic, float32 and float64, three steps on the same parameters and
// gradients. Both devices evaluate the same element function (src/tensor/update_rules.h)
// with the same explicit fma, division and square root, and nothing else is fused
// (-ffp-contract=off, -fmad=false), so the results should be identical; the check allows
// one unit of rounding per step in case a device library rounds differently (normwise
// 1e-6 in float32, 1e-14 in float64) and reports whether they were bit-identical.
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <tessera/tessera.h>

#include "../optim/param_groups_golden.h"
#include "gpu_test.h"

namespace ts = tessera;
namespace optim = tessera::optim;
using ts::DType;
using ts::Tensor;

namespace {

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

struct Case {
  const char* name;
  MakeOptimizer make;
};

std::vector<Case> cases() {
  return {
      {"SGD", [](auto p) { return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1}); }},
      {"SGD momentum dampening weight_decay",
       [](auto p) {
         return std::make_unique<optim::SGD>(
             p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
       }},
      {"SGD nesterov maximize",
       [](auto p) {
         return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .momentum = 0.8, .nesterov = true,
                                                                  .maximize = true});
       }},
      {"Adam", [](auto p) { return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 1e-2}); }},
      {"Adam amsgrad weight_decay",
       [](auto p) {
         return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true});
       }},
      {"AdamW maximize",
       [](auto p) { return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = 1e-2, .maximize = true}); }},
      {"Adadelta", [](auto p) { return std::make_unique<optim::Adadelta>(p, optim::AdadeltaOptions{}); }},
      {"Adadelta weight_decay",
       [](auto p) {
         return std::make_unique<optim::Adadelta>(p, optim::AdadeltaOptions{.lr = 0.5, .weight_decay = 0.1});
       }},
  };
}

// Runs three steps of `make` on parameters of `dtype` on `device`; returns the parameters
// and every per-element state tensor, on the CPU.
std::vector<Tensor> run(const MakeOptimizer& make, DType dtype, ts::Device device) {
  ts::Generator gen(17);
  std::vector<Tensor> params;
  for (ts::Shape shape : {ts::Shape{1000}, ts::Shape{33, 7}, ts::Shape{1}}) {
    params.push_back(ts::randn(shape, gen, {.dtype = dtype}).to(device).detach().requires_grad_());
  }
  std::unique_ptr<optim::Optimizer> optimizer = make(params);
  for (int step = 0; step < 3; ++step) {
    for (Tensor& p : params) p.set_grad(ts::randn(p.sizes(), gen, {.dtype = dtype}).to(device));
    optimizer->step();
  }
  std::vector<Tensor> out;
  for (size_t i = 0; i < params.size(); ++i) {
    out.push_back(params[i].detach().cpu());
    for (const auto& [name, value] : optimizer->state(i)) {
      if (name != "step") out.push_back(value.cpu());
    }
  }
  return out;
}

}  // namespace

TEST_CASE("fused optimizer updates on CUDA equal the CPU's") {
  if (!gpu_test::cuda_target()) return;
  for (const Case& c : cases()) {
    for (DType dtype : {DType::f32, DType::f64}) {
      CAPTURE(c.name);
      CAPTURE(dtype);
      std::vector<Tensor> cpu = run(c.make, dtype, ts::Device::cpu());
      std::vector<Tensor> gpu = run(c.make, dtype, ts::Device::cuda(0));
      REQUIRE(cpu.size() == gpu.size());
      double worst = 0;
      bool identical = true;
      for (size_t k = 0; k < cpu.size(); ++k) {
        std::string problem;
        worst = std::max(worst, gpu_test::normalised_error(gpu[k], cpu[k], problem));
        CHECK_MESSAGE(problem.empty(), problem);
        identical = identical && gpu[k].to_vector<double>() == cpu[k].to_vector<double>();
      }
      MESSAGE(std::string(c.name), " ", std::string(ts::dtype_name(dtype)), ": largest normalised error ", worst,
              identical ? " (bit-identical)" : " (not bit-identical)");
      WARN(identical);
      CHECK(worst <= (dtype == DType::f32 ? 1e-6 : 1e-14));
    }
  }
}

TEST_CASE("an optimizer refuses a gradient on another device than its parameter") {
  if (!gpu_test::cuda_target()) return;
  Tensor p = ts::zeros({3}, {.device = ts::Device::cuda(0)}).requires_grad_();
  optim::SGD sgd({p}, {.lr = 0.1});
  p.set_grad(ts::zeros({3}));
  CHECK_THROWS_AS(sgd.step(), ts::DeviceError);
}

TEST_CASE("parameter groups over flat shards on CUDA equal PyTorch's (the CPU's) steps") {
  // The golden configurations of tests/optim/param_groups_golden.h, fully sharded on the
  // target device over the single-rank group, fed PyTorch's gradients: each original
  // parameter's segment of a CUDA shard updated by the fused kernels with its group's values.
  namespace pg = param_groups_golden;
  const ts::Device device = gpu_test::target();
  for (const pg::Config& config : pg::configs()) {
    for (const std::string dtype_name : {"f32", "f64"}) {
      CAPTURE(config.name);
      CAPTURE(dtype_name);
      pg::Net net(dtype_name);
      net.to(device);
      ts::fsdp::fully_shard(net, std::make_shared<ts::dist::SingleProcessGroup>());
      pg::Params params;
      for (auto& [name, p] : ts::fsdp::named_original_parameters(net)) params[name] = p;
      pg::Run run = config.make(params);
      double worst = 0;
      bool identical = true;
      for (int step = 0; step < pg::kSteps; ++step) {
        if (step == run.add_at) run.add_group();
        for (const ts::fsdp::UnitInfo& unit : ts::fsdp::units(net)) {
          Tensor flat = ts::zeros({unit.layout.padded_numel()}, {.dtype = unit.layout.dtype()});
          for (const ts::fsdp::FlatEntry& entry : unit.layout.entries()) {
            const Tensor& grad =
                pg::golden().at("inputs." + dtype_name + ".grad." + std::to_string(step) + "." + entry.name);
            flat.narrow(0, entry.offset, entry.numel).copy_(grad.reshape({-1}));
          }
          Tensor shard = unit.shard;
          shard.set_grad(flat.to(device));
        }
        run.optimizer->step();
        if (run.schedule() != nullptr) run.schedule()->step();
        ts::StateDict full = net.state_dict();
        for (const std::string& name : pg::kNames) {
          const Tensor& expected = pg::golden().at(config.name + "." + dtype_name + ".step" + std::to_string(step) +
                                                   ".param." + name);
          std::string problem;
          worst = std::max(worst, gpu_test::normalised_error(full.at(name).cpu(), expected, problem));
          CHECK_MESSAGE(problem.empty(), problem);
          identical = identical && pg::same_bits(full.at(name).cpu(), expected);
        }
      }
      WARN_MESSAGE(identical, config.name, " ", dtype_name, ": not bit-identical, largest normalised error ", worst);
      CHECK(worst <= (dtype_name == "f32" ? 1e-6 : 1e-14));
    }
  }
}
