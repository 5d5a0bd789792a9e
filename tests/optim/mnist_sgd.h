// What the float32-accuracy tests share (test_sgd_drift.cpp, test_float32_accuracy.cpp):
// PyTorch's MNIST example network from PyTorch's initial weights, trained by SGD (lr 0.05,
// momentum 0.9) on batches of 64 real MNIST images (tests/optim/data/sgd_drift_golden
// .safetensors, written by make_drift_golden.py), without dropout.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>
#include <tessera/io/safetensors.h>
#include <tessera/tessera.h>

#include "../../examples/mnist_net.h"

namespace mnist_sgd {

namespace ts = tessera;
using ts::DType;

constexpr int kSteps = 36;
constexpr int64_t kBatch = 64;
inline const ts::optim::SGDOptions kSgd{.lr = 0.05, .momentum = 0.9};

inline std::string data_path(const std::string& name) {
  const char* dir = std::getenv("TESSERA_SOURCE_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "TESSERA_SOURCE_DIR is not set (meson test sets it)");
  return std::string(dir) + "/tests/optim/data/" + name;
}

inline const ts::StateDict& golden() {
  static const ts::StateDict file = ts::io::load(data_path("sgd_drift_golden.safetensors"));
  return file;
}

// PyTorch's initial weights (torch.manual_seed(1)), from the training-parity golden.
inline ts::StateDict initial_weights() {
  const ts::StateDict file = ts::io::load(data_path("mnist_training_golden.safetensors"));
  mnist::Net model;
  ts::StateDict weights;
  for (const auto& [name, value] : model.state_dict()) weights.insert(name, file.at(name));
  const double fc1_sum = weights.at("fc1.weight").to(DType::f64).sum().item<double>();
  // (Summed in another order than PyTorch's, so equal to rounding: a changed file differs at the 1e-3 level.)
  REQUIRE_MESSAGE(std::abs(fc1_sum - golden().at("fc1_weight_sum").item<double>()) <= 1e-12 * std::abs(fc1_sum),
                  "mnist_training_golden.safetensors no longer holds the weights make_drift_golden.py used");
  return weights;
}

// Step s's batch of `data` (images and labels in training order), as torchvision's ToTensor
// and Normalize((0.1307,), (0.3081,)) make it in float32.
inline ts::Tensor images(int step, DType dtype, const ts::StateDict& data = golden()) {
  ts::Tensor pixels = data.at("images").narrow(0, step * kBatch, kBatch).to(DType::f32);
  return ((pixels / 255.0 - 0.1307) / 0.3081).to(dtype);
}
inline ts::Tensor labels(int step, const ts::StateDict& data = golden()) {
  return data.at("labels").narrow(0, step * kBatch, kBatch);
}

inline ts::nn::ModuleHolder<mnist::Net> make_model(const ts::StateDict& weights, DType dtype) {
  auto model = ts::nn::make_module<mnist::Net>();
  ts::StateDict float32;  // (rounded, for a probe at float64 parameters)
  for (const auto& [name, value] : weights) float32.insert(name, value.to(DType::f32));
  model->load_state_dict(float32);
  model->to(dtype);
  model->eval();  // no dropout
  return model;
}

inline double relative(double value, double reference) { return std::abs(value - reference) / std::abs(reference); }

// The loss at each step of training in `dtype` on `data`'s batches in the order `batches`.
inline std::vector<double> free_running(const ts::StateDict& weights, const ts::StateDict& data,
                                        const std::vector<int64_t>& batches, DType dtype) {
  auto model = make_model(weights, dtype);
  ts::optim::SGD optimizer(model->parameters(), kSgd);
  std::vector<double> losses;
  for (const int64_t batch : batches) {
    optimizer.zero_grad();
    ts::Tensor loss = ts::nll_loss(model(images(static_cast<int>(batch), dtype, data)),
                                   labels(static_cast<int>(batch), data));
    loss.backward();
    optimizer.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

inline std::vector<int64_t> consecutive(int first_batch) {
  std::vector<int64_t> batches(kSteps);
  for (int step = 0; step < kSteps; ++step) batches[step] = first_batch + step;
  return batches;
}

inline double worst(const std::vector<double>& values) { return *std::max_element(values.begin(), values.end()); }

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t half = values.size() / 2;
  return values.size() % 2 == 1 ? values[half] : (values[half - 1] + values[half]) / 2;
}

// The worst relative loss difference over the steps: the drift of a float32 run.
inline double worst_drift(const std::vector<double>& f32, const std::vector<double>& f64) {
  double drift = 0;
  for (size_t i = 0; i < f32.size(); ++i) drift = std::max(drift, relative(f32[i], f64[i]));
  return drift;
}

}  // namespace mnist_sgd
