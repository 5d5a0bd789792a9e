// Shared by the parameter-group golden tests (tests/optim, one process; tests/fsdp, under
// mpirun): tests/optim/data/param_groups_golden.safetensors (written by
// make_param_groups_golden.py, whose OPTIMIZERS and SCHEDULERS tables this file mirrors),
// the model whose parameters it names, and each configuration built in Tessera.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <tessera/io/safetensors.h>
#include <tessera/tessera.h>

namespace param_groups_golden {

namespace ts = tessera;
namespace optim = tessera::optim;

constexpr int kSteps = 6;
constexpr int kScheduleSteps = 40;

inline std::string golden_path() {
  const char* dir = std::getenv("TESSERA_SOURCE_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "TESSERA_SOURCE_DIR is not set (meson test sets it)");
  return std::string(dir) + "/tests/optim/data/param_groups_golden.safetensors";
}

inline const ts::StateDict& golden() {
  static const ts::StateDict file = ts::io::load(golden_path());
  return file;
}

// The file's metadata (the schedulers' state-dict key lists).
inline const std::map<std::string, std::string>& golden_metadata() {
  static const std::map<std::string, std::string> metadata = [] {
    ts::io::SafetensorsFile file(golden_path());
    return std::map<std::string, std::string>(file.metadata().begin(), file.metadata().end());
  }();
  return metadata;
}

// The golden's parameters, in named_parameters() order: a root parameter and two children
// with a weight and a bias each (under FSDP: units "a", "b" and the root's).
struct Part : ts::nn::Module {
  ts::Tensor weight, bias;
  Part(ts::Tensor w, ts::Tensor b) : weight(std::move(w)), bias(std::move(b)) {
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
  std::string type_name() const override { return "Part"; }
};

struct Net : ts::nn::Module {
  ts::Tensor scale;
  Part a, b;
  // Initial values from the golden in `dtype_name` ("f32" or "f64").
  explicit Net(const std::string& dtype_name)
      : scale(initial(dtype_name, "scale")),
        a(initial(dtype_name, "a.weight"), initial(dtype_name, "a.bias")),
        b(initial(dtype_name, "b.weight"), initial(dtype_name, "b.bias")) {
    register_parameter("scale", scale);
    register_modules({{"a", a}, {"b", b}});
  }
  std::string type_name() const override { return "Net"; }
  static ts::Tensor initial(const std::string& dtype_name, const std::string& name) {
    return golden().at("inputs." + dtype_name + ".param." + name).clone();
  }
};

inline const std::vector<std::string> kNames{"scale", "a.weight", "a.bias", "b.weight", "b.bias"};
inline const std::vector<std::string> kDecay{"a.weight", "b.weight"};
inline const std::vector<std::string> kNoDecay{"scale", "a.bias", "b.bias"};

using Params = std::map<std::string, ts::Tensor>;

inline std::vector<ts::Tensor> pick(const Params& params, const std::vector<std::string>& names) {
  std::vector<ts::Tensor> out;
  for (const std::string& name : names) out.push_back(params.at(name));
  return out;
}

// An optimizer with its schedule (the schedulers it owns, the one to step last).
struct Run {
  std::unique_ptr<optim::Optimizer> optimizer;
  std::vector<std::unique_ptr<optim::LRScheduler>> schedulers;
  std::function<void()> add_group;  // add_param_group, for the configuration that has one
  int add_at = -1;                  // before this step
  optim::LRScheduler* schedule() const { return schedulers.empty() ? nullptr : schedulers.back().get(); }
};

struct Config {
  std::string name;
  std::function<Run(const Params&)> make;
};

inline std::vector<Config> configs() {
  using optim::Adadelta, optim::Adam, optim::AdamW, optim::SGD;
  return {
      {"adamw_nanogpt",
       [](const Params& p) {
         Run run;
         run.optimizer = std::make_unique<AdamW>(
             std::vector<AdamW::ParamGroup>{{pick(p, kDecay), {.weight_decay = 0.1}},
                                            {pick(p, kNoDecay), {.weight_decay = 0.0}}},
             optim::AdamWOptions{.lr = 0.01, .betas = {0.9, 0.95}});
         return run;
       }},
      {"adam_groups",
       [](const Params& p) {
         Run run;
         run.optimizer = std::make_unique<Adam>(
             std::vector<Adam::ParamGroup>{{pick(p, kDecay), {.weight_decay = 0.05, .amsgrad = true}},
                                           {pick(p, kNoDecay), {.lr = 0.02}}},
             optim::AdamOptions{.lr = 0.01});
         return run;
       }},
      {"sgd_groups",
       [](const Params& p) {
         Run run;
         run.optimizer = std::make_unique<SGD>(
             std::vector<SGD::ParamGroup>{{pick(p, kDecay), {.momentum = 0.9, .weight_decay = 0.01, .nesterov = true}},
                                          {pick(p, kNoDecay), {.lr = 0.05, .momentum = 0.0}}},
             optim::SGDOptions{.lr = 0.1});
         return run;
       }},
      {"sgd_dampening_groups",
       [](const Params& p) {
         Run run;
         run.optimizer = std::make_unique<SGD>(
             std::vector<SGD::ParamGroup>{{pick(p, kDecay), {.dampening = 0.3}},
                                          {pick(p, kNoDecay), {.weight_decay = 0.1, .maximize = true}}},
             optim::SGDOptions{.lr = 0.1, .momentum = 0.5});
         return run;
       }},
      {"adadelta_groups",
       [](const Params& p) {
         Run run;
         run.optimizer = std::make_unique<Adadelta>(
             std::vector<Adadelta::ParamGroup>{{pick(p, kDecay), {.rho = 0.95, .weight_decay = 0.05}},
                                               {pick(p, kNoDecay), {.lr = 0.5, .eps = 1e-5}}},
             optim::AdadeltaOptions{.lr = 1.0});
         return run;
       }},
      {"adamw_add_group",
       [](const Params& p) {
         Run run;
         auto adamw = std::make_unique<AdamW>(std::vector<AdamW::ParamGroup>{{pick(p, kDecay)}},
                                              optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
         AdamW* raw = adamw.get();
         run.add_group = [raw, no_decay = pick(p, kNoDecay)] {
           raw->add_param_group({no_decay, {.lr = 0.003, .weight_decay = 0.0}});
         };
         run.add_at = 2;
         run.optimizer = std::move(adamw);
         return run;
       }},
      {"adamw_warmup_cosine",
       [](const Params& p) {
         Run run;
         run.optimizer = std::make_unique<AdamW>(
             std::vector<AdamW::ParamGroup>{{pick(p, kDecay), {.weight_decay = 0.1}},
                                            {pick(p, kNoDecay), {.weight_decay = 0.0}}},
             optim::AdamWOptions{.lr = 0.01, .betas = {0.9, 0.95}});
         optim::Optimizer& opt = *run.optimizer;
         run.schedulers.push_back(std::make_unique<optim::LinearLR>(opt, optim::LinearLROptions{.start_factor = 0.1, .total_iters = 3}));
         run.schedulers.push_back(std::make_unique<optim::CosineAnnealingLR>(opt, 4, 1e-4));
         run.schedulers.push_back(std::make_unique<optim::SequentialLR>(
             opt, std::vector<std::reference_wrapper<optim::LRScheduler>>{*run.schedulers[0], *run.schedulers[1]},
             std::vector<int64_t>{3}));
         return run;
       }},
      {"sgd_step_lr",
       [](const Params& p) {
         Run run;
         run.optimizer = std::make_unique<SGD>(
             std::vector<SGD::ParamGroup>{{pick(p, kDecay), {.lr = 0.2}}, {pick(p, kNoDecay)}},
             optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
         run.schedulers.push_back(std::make_unique<optim::StepLR>(*run.optimizer, 2, 0.5));
         return run;
       }},
  };
}

// The schedulers' configurations, each built over an SGD with two groups (lr 0.1 and 0.05).
struct Schedule {
  ts::Tensor first = ts::zeros({1}).requires_grad_(), second = ts::zeros({1}).requires_grad_();
  optim::SGD optimizer{std::vector<optim::SGD::ParamGroup>{{{first}}, {{second}, {.lr = 0.05}}}, {.lr = 0.1}};
  std::vector<std::unique_ptr<optim::LRScheduler>> schedulers;
  optim::LRScheduler& main() { return *schedulers.back(); }
};

using Refs = std::vector<std::reference_wrapper<optim::LRScheduler>>;

inline std::vector<std::pair<std::string, std::function<void(Schedule&)>>> schedules() {
  using namespace optim;
  auto add = [](Schedule& s, auto scheduler) { s.schedulers.push_back(std::move(scheduler)); };
  return {
      {"step_lr", [=](Schedule& s) { add(s, std::make_unique<StepLR>(s.optimizer, 3, 0.5)); }},
      {"linear_warmup",
       [=](Schedule& s) {
         add(s, std::make_unique<LinearLR>(s.optimizer, LinearLROptions{.start_factor = 0.25, .end_factor = 1.0, .total_iters = 6}));
       }},
      {"linear_decay",
       [=](Schedule& s) {
         add(s, std::make_unique<LinearLR>(s.optimizer, LinearLROptions{.start_factor = 1.0, .end_factor = 0.1, .total_iters = 10}));
       }},
      {"cosine", [=](Schedule& s) { add(s, std::make_unique<CosineAnnealingLR>(s.optimizer, 10, 0.001)); }},
      {"cosine_zero_floor", [=](Schedule& s) { add(s, std::make_unique<CosineAnnealingLR>(s.optimizer, 7)); }},
      {"cosine_resumed",
       [=](Schedule& s) {
         add(s, std::make_unique<CosineAnnealingLR>(s.optimizer, 10, 0.001));  // sets initial_lr
         add(s, std::make_unique<CosineAnnealingLR>(s.optimizer, 10, 0.001, /*last_epoch=*/5));
       }},
      {"lambda_per_group",
       [=](Schedule& s) {
         add(s, std::make_unique<LambdaLR>(s.optimizer, std::vector<LambdaLR::Lambda>{
                                                            [](int64_t e) { return std::pow(0.95, static_cast<double>(e)); },
                                                            [](int64_t e) { return 1.0 / static_cast<double>(e + 1); }}));
       }},
      {"lambda_warmup",
       [=](Schedule& s) {
         add(s, std::make_unique<LambdaLR>(s.optimizer,
                                           [](int64_t e) { return std::min(1.0, static_cast<double>(e + 1) / 8.0); }));
       }},
      {"warmup_cosine",
       [=](Schedule& s) {
         add(s, std::make_unique<LinearLR>(s.optimizer, LinearLROptions{.start_factor = 0.01, .total_iters = 5}));
         add(s, std::make_unique<CosineAnnealingLR>(s.optimizer, 30, 1e-5));
         add(s, std::make_unique<SequentialLR>(s.optimizer, Refs{*s.schedulers[0], *s.schedulers[1]},
                                               std::vector<int64_t>{5}));
       }},
      {"three_phases",
       [=](Schedule& s) {
         add(s, std::make_unique<LinearLR>(s.optimizer, LinearLROptions{.start_factor = 0.5, .total_iters = 4}));
         add(s, std::make_unique<StepLR>(s.optimizer, 2, 0.7));
         add(s, std::make_unique<CosineAnnealingLR>(s.optimizer, 10));
         add(s, std::make_unique<SequentialLR>(s.optimizer, Refs{*s.schedulers[0], *s.schedulers[1], *s.schedulers[2]},
                                               std::vector<int64_t>{4, 12}));
       }},
  };
}

// True when `a` and `b` have the same shape, dtype and bits.
inline bool same_bits(const ts::Tensor& a, const ts::Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  ts::Tensor ca = a.detach().contiguous(), cb = b.detach().contiguous();
  return a.numel() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// Every "<prefix><group>.<key>" of the golden equals the optimizer's state_dict entry
// "param_groups.<group>.<key>" bit for bit (the dtype of bools and floats is float64 in
// both); returns how many were compared.
inline int check_param_groups(const optim::Optimizer& optimizer, const std::string& prefix) {
  const ts::StateDict mine = optimizer.param_groups_state_dict();
  int compared = 0;
  for (const auto& [key, expected] : golden()) {
    if (key.rfind(prefix, 0) != 0) continue;
    const std::string name = "param_groups." + key.substr(prefix.size());
    CAPTURE(name);
    CHECK(mine.contains(name));  // not REQUIRE: the dist tests use this too, and ranks must stay in step
    if (!mine.contains(name)) continue;
    CHECK(same_bits(mine.at(name), expected));
    ++compared;
  }
  size_t hyper = 0;  // every one of ours is in PyTorch's too
  for (const auto& [key, value] : mine) hyper += key.size() < 7 || key.substr(key.size() - 7) != ".params";
  CHECK(static_cast<int>(hyper) == compared);
  return compared;
}

}  // namespace param_groups_golden
