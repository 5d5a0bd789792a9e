// The GPT-2 goldens (tests/models/make_gpt2_reference.py) for the unit and dist tests: the
// tiny config, the training settings, the tokens, and comparisons with PyTorch's figures.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <tessera/tessera.h>

namespace gpt2_reference {

namespace ts = tessera;
namespace json = tessera::io::json;

inline std::string source_path(const std::string& relative) {
  const char* dir = std::getenv("TESSERA_SOURCE_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "TESSERA_SOURCE_DIR is not set (meson test sets it)");
  return std::string(dir) + "/tests/models/" + relative;
}

struct Training {
  int64_t steps, batch, seq_len, warmup_steps;
  double lr, min_lr, weight_decay, beta1, beta2, eps, grad_clip;
};

struct Reference {
  ts::StateDict tensors;
  ts::models::GPTConfig config;
  Training training;
  int64_t prompt_length, new_tokens;

  const ts::Tensor& at(const std::string& name) const { return tensors.at(name); }
  // Step `step`'s inputs and targets [B, T].
  ts::Tensor inputs(int64_t step) const { return at("tokens").select(0, step).narrow(1, 0, training.seq_len); }
  ts::Tensor targets(int64_t step) const { return at("tokens").select(0, step).narrow(1, 1, training.seq_len); }
};

inline const Reference& reference() {
  static const Reference loaded = [] {
    const std::string path = source_path("gpt2_reference.safetensors");
    ts::io::Metadata metadata = ts::io::load_metadata(path);
    json::Value config = json::parse(metadata.at("config"));
    json::Value training = json::parse(metadata.at("training"));
    json::Value generation = json::parse(metadata.at("generation"));
    Reference r{.tensors = ts::io::load(path),
                .config = {.n_layer = config.at("n_layer").as_int(),
                           .n_head = config.at("n_head").as_int(),
                           .n_embd = config.at("n_embd").as_int(),
                           .block_size = config.at("block_size").as_int(),
                           .vocab_size = config.at("vocab_size").as_int(),
                           .dropout = config.at("dropout").as_double(),
                           .bias = config.at("bias").as_bool()},
                .training = {.steps = training.at("steps").as_int(),
                             .batch = training.at("batch").as_int(),
                             .seq_len = training.at("seq_len").as_int(),
                             .warmup_steps = training.at("warmup_steps").as_int(),
                             .lr = training.at("lr").as_double(),
                             .min_lr = training.at("min_lr").as_double(),
                             .weight_decay = training.at("weight_decay").as_double(),
                             .beta1 = training.at("beta1").as_double(),
                             .beta2 = training.at("beta2").as_double(),
                             .eps = training.at("eps").as_double(),
                             .grad_clip = training.at("grad_clip").as_double()},
                .prompt_length = generation.at("prompt_length").as_int(),
                .new_tokens = generation.at("new_tokens").as_int()};
    return r;
  }();
  return loaded;
}

// The initial weights, as the hub's model.safetensors holds them (float64).
inline const ts::StateDict& hub_weights() {
  static const ts::StateDict weights = ts::io::load(source_path("gpt2_tiny_hub.safetensors"));
  return weights;
}

inline std::string tag(ts::DType dtype) { return dtype == ts::DType::f64 ? "f64" : "f32"; }

// The tiny model in `dtype` with the reference's initial weights, loaded the way a user's
// HF file is.
inline std::unique_ptr<ts::models::GPT2> reference_model(ts::DType dtype) {
  auto model = std::make_unique<ts::models::GPT2>(reference().config);
  model->to(dtype);
  model->load_hf_state_dict(hub_weights());
  return model;
}

inline double normwise_error(const ts::Tensor& actual, const ts::Tensor& expected) {
  ts::Tensor a = actual.detach().to(ts::DType::f64).cpu(), b = expected.to(ts::DType::f64);
  const double diff = (a - b).pow(2.0).sum().item<double>(), norm = b.pow(2.0).sum().item<double>();
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-300);
}

inline double relative_error(double actual, double expected) {
  return std::abs(actual - expected) / std::max(std::abs(expected), 1e-300);
}

// Per-step relative tolerance on losses against PyTorch (the bars): float64 1e-10,
// float32 1e-5. The two compute the same formulas in other summation orders (GEMM blocking,
// the blocked attention's online softmax against the math form, a fused layer norm), so they
// agree to rounding; 10 AdamW steps amplify that a little. Measured worst: see test_gpt2.cpp.
inline double loss_tolerance(ts::DType dtype) { return dtype == ts::DType::f64 ? 1e-10 : 1e-5; }

// nanoGPT's get_lr(it) as a LambdaLR factor of the base rate (the reference's schedule).
inline double nanogpt_lr_factor(int64_t step, const Training& t) {
  double lr;
  if (step < t.warmup_steps) {
    lr = t.lr * static_cast<double>(step + 1) / static_cast<double>(t.warmup_steps + 1);
  } else if (step > t.steps) {
    lr = t.min_lr;
  } else {
    const double ratio = static_cast<double>(step - t.warmup_steps) / static_cast<double>(t.steps - t.warmup_steps);
    lr = t.min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (t.lr - t.min_lr);
  }
  return lr / t.lr;
}

}  // namespace gpt2_reference
