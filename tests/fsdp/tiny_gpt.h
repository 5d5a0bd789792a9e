// A GPT-shaped model for the FSDP tests, laid out as nanoGPT's (transformer.wte, .wpe,
// .h.N, .ln_f; lm_head) from the transformer layers, in float64: each Block is LayerNorm,
// Linear, tanh GELU, an optional inner Dropout, Linear and Dropout(0.1) on a residual, and
// prints as "Block" (what the tests' wrap and checkpoint policies name).
#pragma once

#include <cstdint>
#include <string>

#include "tessera/tessera.h"

namespace fsdp_test {

struct TinyGPTConfig {
  int64_t vocab = 11, width = 8, tokens = 5, layers = 2;
  double inner_dropout = 0.0;  // > 0: a Dropout "inner" between the GELU and c_proj
  uint64_t seed = 5;           // reset_parameters'
};

struct Block : tessera::nn::Module {
  tessera::nn::LayerNorm ln_1;
  tessera::nn::Linear c_fc;
  tessera::nn::GELU gelu{"tanh"};
  tessera::nn::Dropout inner;
  tessera::nn::Linear c_proj;
  tessera::nn::Dropout dropout{0.1};
  bool has_inner;

  Block(int64_t width, double inner_dropout)
      : ln_1(width), c_fc(width, 4 * width), inner(inner_dropout), c_proj(4 * width, width),
        has_inner(inner_dropout > 0) {
    if (has_inner) {
      register_modules({{"ln_1", ln_1}, {"c_fc", c_fc}, {"gelu", gelu}, {"inner", inner}, {"c_proj", c_proj},
                        {"dropout", dropout}});
    } else {
      register_modules({{"ln_1", ln_1}, {"c_fc", c_fc}, {"gelu", gelu}, {"c_proj", c_proj}, {"dropout", dropout}});
    }
  }
  tessera::Tensor forward(tessera::Tensor x) override {
    tessera::Tensor hidden = gelu(c_fc(ln_1(x)));
    if (has_inner) hidden = inner(hidden);
    return x + dropout(c_proj(hidden));
  }
  std::string type_name() const override { return "Block"; }
};

struct TinyGPT : tessera::nn::Module {
  tessera::nn::ModuleDict transformer;
  tessera::nn::Linear lm_head;

  explicit TinyGPT(const TinyGPTConfig& config) : lm_head(config.width, config.vocab, {.bias = false}) {
    transformer.emplace<tessera::nn::Embedding>("wte", config.vocab, config.width);
    transformer.emplace<tessera::nn::Embedding>("wpe", config.tokens, config.width);
    auto& h = transformer.emplace<tessera::nn::ModuleList>("h");
    for (int64_t i = 0; i < config.layers; ++i) h.emplace<Block>(config.width, config.inner_dropout);
    transformer.emplace<tessera::nn::LayerNorm>("ln_f", config.width);
    register_modules({{"transformer", transformer}, {"lm_head", lm_head}});
    to(tessera::DType::f64);
    reset_parameters(config.seed);
  }
  tessera::Tensor forward(tessera::Tensor ids) override {
    tessera::Tensor positions = tessera::arange(ids.size(1), {.dtype = tessera::DType::i64});
    tessera::Tensor x = transformer["wte"](ids) + transformer["wpe"](positions);
    for (tessera::nn::Module& block : transformer.at<tessera::nn::ModuleList>("h")) x = block(x);
    return lm_head(transformer["ln_f"](x));
  }
};

}  // namespace fsdp_test
