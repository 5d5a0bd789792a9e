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
inline ts::nn::ModuleHolder<ts::models::GPT2> reference_model(ts::DType dtype) {
  auto model = ts::nn::make_module<ts::models::GPT2>(reference().config);
  model->to(dtype);
  model->load_hf_state_dict(hub_weights());
  return model;
}

inline double relative_error(double actual, double expected) {
  return std::abs(actual - expected) / std::max(std::abs(expected), 1e-300);
}

// Per-step relative tolerance on losses against PyTorch (the bars): float64 1e-10,
// float32 1e-5. The two compute the same formulas in other summation orders (GEMM blocking,
// the blocked attention's online softmax against the math form, a fused layer norm), so they
// agree to rounding; 10 AdamW steps amplify that a little. Measured worst: see test_gpt2.cpp.
inline double loss_tolerance(ts::DType dtype) { return dtype == ts::DType::f64 ? 1e-10 : 1e-5; }

// nanoGPT's optimizer: AdamW with weight decay on the 2-D parameters only, the rate from
// nanoGPT's get_lr through LambdaLR (optim::warmup_cosine). `named` are the original parameters (under FSDP,
// fsdp::named_original_parameters: each steps its segment of its unit's shard).
struct NanoGptOptimizer {
  std::unique_ptr<ts::optim::AdamW> adamw;
  std::unique_ptr<ts::optim::LambdaLR> schedule;

  NanoGptOptimizer(const std::vector<std::pair<std::string, ts::Tensor>>& named, const Training& t) {
    std::vector<ts::Tensor> decay, no_decay;
    for (const auto& [name, p] : named) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    adamw = std::make_unique<ts::optim::AdamW>(
        std::vector<ts::optim::AdamW::ParamGroup>{{decay, {.weight_decay = t.weight_decay}}, {no_decay, {.weight_decay = 0.0}}},
        ts::optim::AdamWOptions{.lr = t.lr, .betas = {t.beta1, t.beta2}, .eps = t.eps});
    schedule = std::make_unique<ts::optim::LambdaLR>(
        *adamw, ts::optim::warmup_cosine({.lr = t.lr, .min_lr = t.min_lr, .warmup_steps = t.warmup_steps, .decay_steps = t.steps}));
  }
};

// Step `step`'s loss on rows [begin, begin + rows) of its global batch: the cross entropy
// summed over those rows' tokens, divided by the global batch's token count, so that the
// ranks' losses (and, reduced by sum, their gradients) add up to the mean over the batch.
inline ts::Tensor rows_loss(ts::models::GPT2& model, int64_t step, int64_t begin, int64_t rows) {
  const Reference& r = reference();
  ts::Tensor inputs = r.inputs(step).narrow(0, begin, rows), targets = r.targets(step).narrow(0, begin, rows);
  ts::Tensor logits = model(inputs);
  const double global_tokens = static_cast<double>(r.training.batch * r.training.seq_len);
  return ts::cross_entropy(logits.flatten(0, 1), targets.flatten(), {.reduction = ts::Reduction::sum}) / global_tokens;
}

}  // namespace gpt2_reference
