// Optimizers against PyTorch 1.13: the same parameters and gradients, step by step, in
// float32 and float64, compared with tests/optim/data/optimizer_golden.safetensors (written
// by make_golden.py, whose CONFIGS table this file mirrors).
//
// Tolerance: none. Every parameter and state element must match PyTorch bit for bit, in
// both dtypes: the fused loops perform PyTorch's single-tensor sequence of roundings
// (scalars computed in double as Python does, cast to the tensor dtype; fma where
// PyTorch's kernels use one, see src/tensor/update_rules.h). A mismatch is reported in units
// in the last place so that a drift is measurable, not only detected.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <tessera/io/safetensors.h>
#include <tessera/tessera.h>

namespace ts = tessera;
namespace optim = tessera::optim;
using ts::DType;

namespace {

constexpr int kSteps = 5;
constexpr int kParams = 3;

std::string golden_path() {
  const char* dir = std::getenv("TESSERA_SOURCE_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "TESSERA_SOURCE_DIR is not set (meson test sets it)");
  return std::string(dir) + "/tests/optim/data/optimizer_golden.safetensors";
}

const ts::StateDict& golden() {
  static const ts::StateDict file = ts::io::load(golden_path());
  return file;
}

struct Config {
  std::string name;
  std::map<std::string, double> hyper;  // as the file's "<name>.hyper.<key>"
  std::function<std::unique_ptr<optim::Optimizer>(std::vector<ts::Tensor>)> make;
  std::optional<std::pair<int64_t, double>> step_lr;  // step_size, gamma
};

std::vector<Config> configs() {
  using optim::AdadeltaOptions, optim::AdamOptions, optim::AdamWOptions, optim::SGDOptions;
  auto sgd = [](SGDOptions o) { return [o](auto p) { return std::unique_ptr<optim::Optimizer>(new optim::SGD(p, o)); }; };
  auto adam = [](AdamOptions o) { return [o](auto p) { return std::unique_ptr<optim::Optimizer>(new optim::Adam(p, o)); }; };
  auto adamw = [](AdamWOptions o) { return [o](auto p) { return std::unique_ptr<optim::Optimizer>(new optim::AdamW(p, o)); }; };
  auto adadelta = [](AdadeltaOptions o) {
    return [o](auto p) { return std::unique_ptr<optim::Optimizer>(new optim::Adadelta(p, o)); };
  };
  return {
      {"sgd", {{"lr", 0.1}}, sgd({.lr = 0.1}), {}},
      {"sgd_momentum", {{"lr", 0.1}, {"momentum", 0.9}}, sgd({.lr = 0.1, .momentum = 0.9}), {}},
      {"sgd_dampening", {{"lr", 0.1}, {"momentum", 0.9}, {"dampening", 0.3}},
       sgd({.lr = 0.1, .momentum = 0.9, .dampening = 0.3}), {}},
      {"sgd_nesterov", {{"lr", 0.1}, {"momentum", 0.9}, {"nesterov", 1}},
       sgd({.lr = 0.1, .momentum = 0.9, .nesterov = true}), {}},
      {"sgd_weight_decay", {{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 0.01}},
       sgd({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01}), {}},
      {"sgd_maximize", {{"lr", 0.05}, {"momentum", 0.5}, {"weight_decay", 0.1}, {"maximize", 1}},
       sgd({.lr = 0.05, .momentum = 0.5, .weight_decay = 0.1, .maximize = true}), {}},
      {"adam", {{"lr", 0.01}}, adam({.lr = 0.01}), {}},
      {"adam_amsgrad", {{"lr", 0.01}, {"beta1", 0.8}, {"beta2", 0.9}, {"amsgrad", 1}},
       adam({.lr = 0.01, .betas = {0.8, 0.9}, .amsgrad = true}), {}},
      {"adam_weight_decay", {{"lr", 0.01}, {"weight_decay", 0.1}, {"eps", 1e-6}},
       adam({.lr = 0.01, .eps = 1e-6, .weight_decay = 0.1}), {}},
      {"adamw", {{"lr", 0.01}}, adamw({.lr = 0.01}), {}},
      {"adamw_amsgrad", {{"lr", 0.02}, {"weight_decay", 0.5}, {"amsgrad", 1}},
       adamw({.lr = 0.02, .weight_decay = 0.5, .amsgrad = true}), {}},
      {"adadelta", {}, adadelta({}), {}},
      {"adadelta_weight_decay", {{"lr", 0.5}, {"rho", 0.95}, {"eps", 1e-5}, {"weight_decay", 0.05}},
       adadelta({.lr = 0.5, .rho = 0.95, .eps = 1e-5, .weight_decay = 0.05}), {}},
      {"steplr", {{"lr", 0.1}, {"momentum", 0.9}, {"scheduler_step_size", 2}, {"scheduler_gamma", 0.5}},
       sgd({.lr = 0.1, .momentum = 0.9}), std::pair<int64_t, double>{2, 0.5}},
  };
}

// The largest distance, in units in the last place, between corresponding elements
// (0 when bit-identical; NaNs must match NaNs).
template <class T>
int64_t max_ulps(const ts::Tensor& actual, const ts::Tensor& expected) {
  using Bits = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  auto ordered = [](T value) {
    Bits bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits < 0 ? std::numeric_limits<Bits>::min() - bits : bits;  // monotonic in value
  };
  const auto a = actual.to_vector<T>(), e = expected.to_vector<T>();
  int64_t worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(e[i])) {
      if (!(std::isnan(a[i]) && std::isnan(e[i]))) return std::numeric_limits<int64_t>::max();
      continue;
    }
    const int64_t distance = std::llabs(static_cast<int64_t>(ordered(a[i])) - static_cast<int64_t>(ordered(e[i])));
    worst = std::max(worst, distance);
  }
  return worst;
}

int64_t max_ulps(const ts::Tensor& actual, const ts::Tensor& expected) {
  REQUIRE(actual.sizes() == expected.sizes());
  if (expected.dtype() == DType::f32) return max_ulps<float>(actual.to(DType::f32), expected);
  return max_ulps<double>(actual.to(DType::f64), expected.to(DType::f64));
}

}  // namespace

TEST_CASE("the golden file's configurations are the ones this test builds") {
  const ts::StateDict& file = golden();
  for (const Config& config : configs()) {
    CAPTURE(config.name);
    const std::string prefix = config.name + ".hyper.";
    size_t in_file = 0;
    for (const auto& [key, value] : file) {
      if (key.rfind(prefix, 0) != 0) continue;
      ++in_file;
      const std::string hyper = key.substr(prefix.size());
      CAPTURE(hyper);
      REQUIRE(config.hyper.count(hyper) == 1);
      CHECK(value.item<double>() == config.hyper.at(hyper));
    }
    CHECK(in_file == config.hyper.size());
  }
}

TEST_CASE("optimizers match PyTorch 1.13 bit for bit over 5 steps, float32 and float64") {
  const ts::StateDict& file = golden();
  std::string summary;
  for (const Config& config : configs()) {
    for (const std::string dtype_name : {"f32", "f64"}) {
      CAPTURE(config.name);
      CAPTURE(dtype_name);
      std::vector<ts::Tensor> params;
      for (int k = 0; k < kParams; ++k) {
        params.push_back(file.at("inputs." + dtype_name + ".param." + std::to_string(k))
                             .clone()
                             .requires_grad_());
      }
      auto optimizer = config.make(params);
      std::unique_ptr<optim::StepLR> scheduler;
      if (config.step_lr) scheduler = std::make_unique<optim::StepLR>(*optimizer, config.step_lr->first, config.step_lr->second);

      int64_t worst_param = 0, worst_state = 0;
      for (int step = 0; step < kSteps; ++step) {
        CAPTURE(step);
        for (int k = 0; k < kParams; ++k) {
          const std::string key = "inputs." + dtype_name + ".grad." + std::to_string(step) + "." + std::to_string(k);
          params[k].set_grad(file.contains(key) ? file.at(key).clone() : ts::Tensor());
        }
        optimizer->step();
        if (scheduler) {
          scheduler->step();
          const double expected = file.at(config.name + "." + dtype_name + ".lr").to_vector<double>()[step];
          CHECK(scheduler->get_last_lr()[0] == expected);
          CHECK(optimizer->lr() == expected);
        }
        const std::string prefix = config.name + "." + dtype_name + ".step" + std::to_string(step) + ".";
        size_t expected_states = 0;
        for (const auto& [key, expected] : file) {
          if (key.rfind(prefix, 0) != 0) continue;
          const std::string rest = key.substr(prefix.size());  // "<state>.<k>"
          const std::string name = rest.substr(0, rest.rfind('.'));
          const int k = std::stoi(rest.substr(rest.rfind('.') + 1));
          CAPTURE(key);
          if (name == "param") {
            const int64_t ulps = max_ulps(params[k].detach(), expected);
            worst_param = std::max(worst_param, ulps);
            CHECK(ulps == 0);
          } else {
            ++expected_states;
            REQUIRE(optimizer->state(k).contains(name));
            const ts::Tensor& actual = optimizer->state(k).at(name);
            const int64_t ulps = name == "step" ? (actual.item<double>() == expected.item<double>() ? 0 : 1)
                                                : max_ulps(actual, expected);
            worst_state = std::max(worst_state, ulps);
            CHECK(ulps == 0);
          }
        }
        size_t actual_states = 0;
        for (int k = 0; k < kParams; ++k) actual_states += optimizer->state(k).size();
        CHECK(actual_states == expected_states);
      }
      summary += "\n  " + config.name + " " + dtype_name + ": max ulps params " + std::to_string(worst_param) +
                 ", state " + std::to_string(worst_state);
    }
  }
  MESSAGE("distance from PyTorch:", summary);
}
