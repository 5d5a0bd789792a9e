// A GPT-2 transformer block as a user writes it (causal self-attention + MLP + two
// LayerNorms, nanoGPT's Block without dropout) matches the same block in PyTorch 1.13 on the
// same weights (tests/nn/make_transformer_block_reference.py; its attention is the math
// formula written out): the output and the gradients of the input and of every parameter.
//
// Tolerances, relative to each tensor's largest magnitude. float64: 1e-12; both sides do
// the same arithmetic in another order (blocked attention with an online softmax, other GEMM
// blockings), a few ulps of O(1) values after sums of at most 128 terms. float32: 1e-5; the
// same differences at float32's 6e-8 rounding through two LayerNorms, four GEMM layers and a
// softmax (about 1e-6 measured).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <tessera/tessera.h>

#include "test_support.h"

namespace ts = tessera;
namespace nn = tessera::nn;
using ts::DType;
using ts::Tensor;

namespace {

struct CausalSelfAttention : nn::Module {
  int64_t n_head;
  nn::Linear c_attn, c_proj;
  CausalSelfAttention(int64_t n_embd, int64_t heads) : n_head(heads), c_attn(n_embd, 3 * n_embd), c_proj(n_embd, n_embd) {
    register_modules({{"c_attn", c_attn}, {"c_proj", c_proj}});
  }
  Tensor forward(Tensor x) override {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    std::vector<Tensor> qkv = c_attn(x).split(C, 2);
    auto heads = [&](const Tensor& t) { return t.view({B, T, n_head, C / n_head}).transpose(1, 2); };
    Tensor y = ts::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), {.is_causal = true});
    return c_proj(y.transpose(1, 2).contiguous().view({B, T, C}));
  }
};

struct MLP : nn::Module {
  nn::Linear c_fc, c_proj;
  nn::GELU gelu{"tanh"};
  explicit MLP(int64_t n_embd) : c_fc(n_embd, 4 * n_embd), c_proj(4 * n_embd, n_embd) {
    register_modules({{"c_fc", c_fc}, {"gelu", gelu}, {"c_proj", c_proj}});
  }
  Tensor forward(Tensor x) override { return c_proj(gelu(c_fc(x))); }
};

struct Block : nn::Module {
  nn::LayerNorm ln_1, ln_2;
  CausalSelfAttention attn;
  MLP mlp;
  Block(int64_t n_embd, int64_t heads) : ln_1(n_embd), ln_2(n_embd), attn(n_embd, heads), mlp(n_embd) {
    register_modules({{"ln_1", ln_1}, {"attn", attn}, {"ln_2", ln_2}, {"mlp", mlp}});
  }
  Tensor forward(Tensor x) override {
    x = x + attn(ln_1(x));
    return x + mlp(ln_2(x));
  }
};

}  // namespace

TEST_CASE("a user's GPT-2 block matches PyTorch 1.13 on the same weights, forward and gradients") {
  const char* dir = std::getenv("TESSERA_SOURCE_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "TESSERA_SOURCE_DIR is not set (meson test sets it)");
  const ts::StateDict reference = ts::io::load(std::string(dir) + "/tests/nn/transformer_block_reference.safetensors");
  for (const auto& [prefix, dtype, tolerance] : {std::tuple{std::string("f32"), DType::f32, 1e-5}, {std::string("f64"), DType::f64, 1e-12}}) {
    CAPTURE(prefix);
    auto stored = [&](const std::string& name) { return reference.at(prefix + "/" + name); };
    Block block(32, 4);
    block.to(dtype);
    ts::StateDict weights;
    for (const auto& [name, unused] : block.named_parameters()) weights.insert(name, stored(name));
    block.load_state_dict(weights);
    Tensor x = stored("x").clone().requires_grad_();
    Tensor y = block(x);
    y.backward(stored("grad_output"));
    double worst = test_support::largest_error(y, stored("output"));
    CHECK(worst <= tolerance);
    CHECK(test_support::largest_error(x.grad(), stored("grad/x")) <= tolerance);
    for (const auto& [name, parameter] : block.named_parameters()) {
      CAPTURE(name);
      const double difference = test_support::largest_error(parameter.grad(), stored("grad/" + name));
      CHECK(difference <= tolerance);
      worst = std::max(worst, difference);
    }
    MESSAGE(prefix << ": largest difference from PyTorch, relative to each tensor's largest value: " << worst);
  }
}
