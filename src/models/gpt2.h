// GPT-2 with Hugging Face's GPT2LMHeadModel module tree, names and layouts, so that the
// weights users have load and what is saved here loads there:
//
//   transformer.wte            Embedding(vocab_size, n_embd)      token embeddings
//   transformer.wpe            Embedding(block_size, n_embd)      position embeddings
//   transformer.drop           Dropout
//   transformer.h.N.ln_1       LayerNorm(n_embd, eps 1e-5)
//   transformer.h.N.attn       c_attn Conv1D [n_embd, 3 n_embd], c_proj Conv1D [n_embd, n_embd],
//                              attn_dropout, resid_dropout
//   transformer.h.N.ln_2       LayerNorm
//   transformer.h.N.mlp        c_fc Conv1D [n_embd, 4 n_embd], tanh GELU, c_proj Conv1D
//                              [4 n_embd, n_embd], dropout
//   transformer.ln_f           LayerNorm
//   lm_head                    logits = x wte.weight^T: tied to transformer.wte, no weight of its own
//
// Conv1D is HF's (and OpenAI's): y = x W + b with W stored [in, out], the transpose of
// nn::Linear's. Attention is ts::scaled_dot_product_attention, causal, scale 1/sqrt(head
// size). Initialisation is GPT-2's as HF and nanoGPT do it: every weight N(0, 0.02), the two
// c_proj weights N(0, 0.02 / sqrt(2 n_layer)) (the residual branches' outputs), biases 0,
// LayerNorms 1 and 0; values keyed by (seed, name, index) like every Tessera parameter.
//
//   ts::models::GPT2 model(ts::models::GPTConfig::preset("gpt2"));      // 124M parameters
//   ts::models::GPT2 tiny({.n_layer = 2, .n_head = 2, .n_embd = 64, .block_size = 128});
//   ts::Tensor logits = model(ids);                  // ids int64 [B, T] -> [B, T, vocab_size]
//   model.load_hf_state_dict(ts::io::load("model.safetensors"));     // HF's GPT-2 weights
//   ts::Tensor out = model.generate(prompt, 50, {.temperature = 0.8, .top_k = 200, .seed = 1});
//
// Under FSDP, keep wte with lm_head in one unit: one unit per GPT2Block and the embeddings
// and ln_f with the root (kBlockTypeName below), so the root's gathered buffer serves both
// uses of the tied weight and its gradient is the sum of both (docs/gpt2.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/autograd/functions.h"
#include "tessera/nn/activation.h"
#include "tessera/nn/containers.h"
#include "tessera/nn/embedding.h"
#include "tessera/nn/layer_norm.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/module.h"

namespace tessera::models {

// nanoGPT's GPTConfig, with GPT-2's vocabulary (50257 tokens).
struct GPTConfig {
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  int64_t block_size = 1024;   // the longest sequence (rows of wpe)
  int64_t vocab_size = 50257;
  double dropout = 0.0;        // embeddings, attention weights and residual branches
  bool bias = true;            // biases in Conv1Ds and LayerNorms, as GPT-2 (false: none)

  // GPT-2's sizes under Hugging Face's names: "gpt2" (12 layers, 12 heads, 768: 124M
  // parameters), "gpt2-medium" (24, 16, 1024: 355M), "gpt2-large" (36, 20, 1280: 774M),
  // "gpt2-xl" (48, 25, 1600: 1558M). ValueError naming the presets for another name.
  static GPTConfig preset(std::string_view name);
  static std::vector<std::string> preset_names();
  // The model's parameter count (wte counted once: lm_head shares it), computed from the
  // sizes alone, so that a model too large for the memory can be refused before it is
  // built. ValueError when it passes int64's range; checked_num_parameters: nullopt then
  // (and for negative sizes).
  int64_t num_parameters() const;
  std::optional<int64_t> checked_num_parameters() const;
  // ValueError naming the field: sizes positive, n_embd divisible by n_head, dropout in [0, 1),
  // the parameter count within int64.
  void check() const;
};

// Hugging Face's Conv1D: y = x weight + bias, weight [nx, nf] (in, out). Constructed as HF's,
// Conv1D(nf, nx): nf outputs from nx inputs; weight ~ N(0, 0.02), bias 0.
class Conv1D : public nn::Module {
 public:
  Conv1D(int64_t nf, int64_t nx, bool bias = true);
  Tensor forward(Tensor input) override;
  std::string type_name() const override { return "Conv1D"; }
  std::string extra_repr() const override;
  int64_t nf() const { return nf_; }
  int64_t nx() const { return nx_; }

  Tensor weight;  // [nx, nf]
  Tensor bias;    // [nf], undefined without bias

 private:
  int64_t nf_, nx_;
};

// The keys and values of the positions seen so far, per layer, so that generating a token
// costs one position's forward instead of the whole sequence's. Made by GPT2::generate, or
// by a caller that decodes on its own (GPT2::attach_cache).
struct KVCache {
  std::vector<Tensor> keys, values;  // per layer: [B, n_head, capacity, head size]
  int64_t length = 0;                // positions filled, at the front of dim 2

  KVCache(const GPTConfig& config, int64_t batch, int64_t capacity, DType dtype, Device device);
  int64_t capacity() const { return keys.empty() ? 0 : keys.front().size(2); }
};

// Causal self-attention: c_attn makes q, k, v [B, n_head, T, head size] from x [B, T, C];
// scaled_dot_product_attention (causal, dropout on the weights from attn_dropout); c_proj;
// resid_dropout.
class GPT2Attention : public nn::Module {
 public:
  explicit GPT2Attention(const GPTConfig& config);
  Tensor forward(Tensor x) override;
  std::string type_name() const override { return "GPT2Attention"; }
  // With a cache, x holds the positions after the cache's `length`: they attend to the
  // cached ones too and their keys and values are written after them (the caller, GPT2Model,
  // advances `length` once every layer has run). Null detaches.
  void set_cache(KVCache* cache, int64_t layer);

  Conv1D c_attn, c_proj;
  nn::Dropout attn_dropout, resid_dropout;

 private:
  int64_t n_head_, n_embd_;
  KVCache* cache_ = nullptr;
  int64_t layer_ = 0;
};

class GPT2MLP : public nn::Module {
 public:
  explicit GPT2MLP(const GPTConfig& config);
  Tensor forward(Tensor x) override { return dropout(c_proj(act(c_fc(x)))); }
  std::string type_name() const override { return "GPT2MLP"; }

  Conv1D c_fc, c_proj;
  nn::GELU act{GeluApproximate::tanh};  // HF's gelu_new
  nn::Dropout dropout;
};

// x + attn(ln_1(x)), then + mlp(ln_2(.)): GPT-2's pre-norm block. type_name() "GPT2Block"
// is what FSDP's module_type wrap policy (and #13's activation checkpointing) names.
class GPT2Block : public nn::Module {
 public:
  explicit GPT2Block(const GPTConfig& config);
  Tensor forward(Tensor x) override;
  std::string type_name() const override { return "GPT2Block"; }

  nn::LayerNorm ln_1;
  GPT2Attention attn;
  nn::LayerNorm ln_2;
  GPT2MLP mlp;
};

// The transformer without its head: ids [B, T] -> hidden states [B, T, n_embd] after ln_f.
class GPT2Model : public nn::Module {
 public:
  explicit GPT2Model(const GPTConfig& config);
  Tensor forward(Tensor ids) override;
  std::string type_name() const override { return "GPT2Model"; }
  // Every block's attention uses `cache` (null detaches); positions then start at its length.
  void set_cache(KVCache* cache);

  nn::Embedding wte, wpe;
  nn::Dropout drop;
  nn::ModuleList h;
  nn::LayerNorm ln_f;

 private:
  GPTConfig config_;
  KVCache* cache_ = nullptr;
};

// HF's lm_head: a Linear without bias whose weight is another module's parameter (here
// transformer.wte.weight, read at each call, so FSDP's views and loaded values are seen).
// It registers no parameter: the state dict has no lm_head.weight, as HF's save_pretrained
// writes it, and the optimizer sees the tied weight once.
class TiedLinear : public nn::Module {
 public:
  TiedLinear(nn::Embedding& tied_to, std::string tied_name);
  // input @ weight^T. Under FSDP the weight must be gathered when the head runs, i.e. in the
  // unit of a module around the head (GPT2's root); a released one is a ValueError saying so.
  Tensor forward(Tensor input) override;
  std::string type_name() const override { return "TiedLinear"; }
  std::string extra_repr() const override;
  const Tensor& weight() const { return tied_to_.weight; }

 private:
  nn::Embedding& tied_to_;
  std::string tied_name_;
};

struct GenerateOptions {
  // Logits are divided by it before sampling; 0 picks the most likely token (greedy). Any
  // positive value works, however small: 1e-300 samples among the tokens tied for the
  // largest logit (greedy without ties), where torch's logits / 1e-300 would be inf.
  double temperature = 1.0;
  // Sample among the k most likely tokens only (nanoGPT's top_k); unset: all of them.
  std::optional<int64_t> top_k{};
  // Draws come from Generator(seed): the same seed gives the same tokens.
  uint64_t seed = 0;
  // Reuse past keys and values (KVCache); false recomputes the whole window each token, as
  // nanoGPT's generate does. Both give the same tokens.
  bool use_cache = true;
};

// FSDP's wrap policy for GPT-2 is FullyShardOptions{.wrap_policy = WrapPolicy::module_type(
// {kBlockTypeName})}: one unit per block, wte/wpe/ln_f (and so the tied head) with the root.
inline constexpr const char* kBlockTypeName = "GPT2Block";

// GPT2LMHeadModel: ids int64 [B, T] (T <= block_size) -> logits [B, T, vocab_size].
class GPT2 : public nn::Module {
 public:
  explicit GPT2(const GPTConfig& config = {});
  Tensor forward(Tensor ids) override;
  // nanoGPT's model(idx, targets): the cross entropy of the logits of ids (int64 [B, T])
  // against targets ([B, T]), with options as ts::cross_entropy's (default: the mean). The
  // logits ([B, T, vocab_size], 4 B T V bytes in float32: 206 MB at 4 x 256 tokens) are not
  // returned, so they are freed before backward instead of living through it.
  Tensor forward(Tensor ids, const Tensor& targets, const CrossEntropyOptions& options = {});
  std::string type_name() const override { return "GPT2LMHeadModel"; }
  const GPTConfig& config() const { return config_; }

  // Appends max_new_tokens tokens to each row of prompt_ids (int64 [B, T] or [T]) and returns
  // the whole sequences ([B, T + max_new_tokens], or [T + max_new_tokens]). Each token is
  // predicted from the last block_size tokens before it (nanoGPT's crop); with the cache, the
  // prompt runs once and then one position per token, until the sequence outgrows block_size
  // and the window slides (the cache is then recomputed per token, as without it). Runs in
  // eval mode without gradients and restores the mode. Under FSDP every rank must call it
  // with the same arguments (the forward passes are collective); all get the same tokens.
  Tensor generate(const Tensor& prompt_ids, int64_t max_new_tokens, const GenerateOptions& options = {});

  // With a cache attached, forward(ids) takes the positions after the cached ones, appends
  // their keys and values, and returns the logits of the last position only ([B, 1, V]).
  void attach_cache(KVCache* cache);

  // Hugging Face's GPT-2 weights as users have them (gpt2_state_dict_from_hf), then
  // load_state_dict: a wrong name or shape is the strict error listing them. Under FSDP
  // every rank passes the full dict and keeps its slices.
  void load_hf_state_dict(const StateDict& hf_state);

  GPT2Model transformer;
  TiedLinear lm_head;

 private:
  GPTConfig config_;
  KVCache* cache_ = nullptr;
};

// Hugging Face GPT-2 names -> this model's: keys with or without the "transformer." prefix
// (HF's hub files have none: they are GPT2Model's), the causal-mask buffers attn.bias and
// attn.masked_bias dropped, lm_head.weight dropped when it equals transformer.wte.weight
// (ValueError when it differs: this model's head is tied). Other keys pass unchanged, for
// load_state_dict to judge.
StateDict gpt2_state_dict_from_hf(const StateDict& hf_state);
// Saves a GPT2 state dict (model.state_dict() or fsdp::full_state_dict) as HF's
// from_pretrained reads model.safetensors: the "transformer." names, no lm_head (tied), and
// the metadata {"format": "pt"} its loader asks for. ValueError for keys of another model.
void save_gpt2_safetensors(const StateDict& state, const std::string& path);
// The config.json Hugging Face's GPT2LMHeadModel.from_pretrained reads beside it.
std::string hf_config_json(const GPTConfig& config);

}  // namespace tessera::models
