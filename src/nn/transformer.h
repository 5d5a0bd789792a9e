// torch.nn.TransformerEncoderLayer, TransformerEncoder, TransformerDecoderLayer and
// TransformerDecoder, with PyTorch's submodule names (so state dicts load both ways),
// defaults and forward.
//
//   ts::nn::TransformerEncoderLayer layer(64, 4, {.dim_feedforward = 128, .batch_first = true});
//   ts::nn::TransformerEncoder encoder(layer, 2);              // layers.0., layers.1., copies of layer
//   ts::Tensor y = encoder(x, {.src_key_padding_mask = padding});   // x [N, T, 64]
//   ts::nn::TransformerDecoderLayer block(64, 4, {.batch_first = true});
//   ts::nn::TransformerDecoder decoder(block, 2, std::make_shared<ts::nn::LayerNorm>(64));
//   ts::Tensor z = decoder(tgt, y, {.tgt_mask = causal});       // tgt [N, S, 64]
//
// Every call operator goes through Module::call, hooks included (FSDP's gathering, activation
// checkpointing); the hooks see src, or tgt and memory.
#pragma once

#include <memory>
#include <string>

#include "tessera/nn/containers.h"
#include "tessera/nn/layer_norm.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/multihead_attention.h"

namespace tessera::nn {

struct TransformerLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // "relu" or "gelu"
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;  // pre-norm: x + block(norm(x)) instead of norm(x + block(x))
  bool bias = true;         // of every Linear, LayerNorm and the attention
};
using TransformerEncoderLayerOptions = TransformerLayerOptions;
using TransformerDecoderLayerOptions = TransformerLayerOptions;

// Masks as MultiheadAttention's (boolean true: not allowed; floating: added).
struct TransformerEncoderForwardOptions {
  Tensor src_mask{};              // [T, T] or [N * nhead, T, T]
  Tensor src_key_padding_mask{};  // [N, T]
  bool is_causal = false;         // src_mask is causal; without src_mask, the causal mask is applied
};

struct TransformerDecoderForwardOptions {
  Tensor tgt_mask{};
  Tensor memory_mask{};
  Tensor tgt_key_padding_mask{};
  Tensor memory_key_padding_mask{};
  bool tgt_is_causal = false;
  bool memory_is_causal = false;
};

// Self-attention and a feed-forward block, each with dropout, a residual and a LayerNorm.
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, const TransformerEncoderLayerOptions& options = {});
  Tensor forward(Tensor src) override { return forward(src, TransformerEncoderForwardOptions{}); }
  Tensor forward(const Tensor& src, const TransformerEncoderForwardOptions& options);
  using Module::operator();
  Tensor operator()(const Tensor& src, const TransformerEncoderForwardOptions& options);

  int64_t d_model() const { return d_model_; }
  int64_t nhead() const { return nhead_; }
  const TransformerEncoderLayerOptions& options() const { return options_; }

  MultiheadAttention self_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  LayerNorm norm1, norm2;
  Dropout dropout1, dropout2;

 private:
  int64_t d_model_, nhead_;
  TransformerEncoderLayerOptions options_;
  bool gelu_ = false;  // else relu
};

// num_layers copies of `layer` (its configuration and its current parameter values, as
// PyTorch's deep copies), under layers.0, layers.1, ..., then `norm` when given.
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(TransformerEncoderLayer& layer, int64_t num_layers, std::shared_ptr<Module> norm = nullptr);
  Tensor forward(Tensor src) override { return forward(src, TransformerEncoderForwardOptions{}); }
  Tensor forward(const Tensor& src, const TransformerEncoderForwardOptions& options);
  using Module::operator();
  Tensor operator()(const Tensor& src, const TransformerEncoderForwardOptions& options);

  ModuleList layers;
  std::shared_ptr<Module> norm;  // null when built without one
  int64_t num_layers() const { return static_cast<int64_t>(layers.size()); }
};

// Self-attention over tgt, attention to memory, and a feed-forward block.
class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, const TransformerDecoderLayerOptions& options = {});
  Tensor forward(const Tensor& tgt, const Tensor& memory, const TransformerDecoderForwardOptions& options = {});
  Tensor operator()(const Tensor& tgt, const Tensor& memory, const TransformerDecoderForwardOptions& options = {});

  int64_t d_model() const { return d_model_; }
  int64_t nhead() const { return nhead_; }
  const TransformerDecoderLayerOptions& options() const { return options_; }

  MultiheadAttention self_attn, multihead_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  LayerNorm norm1, norm2, norm3;
  Dropout dropout1, dropout2, dropout3;

 private:
  int64_t d_model_, nhead_;
  TransformerDecoderLayerOptions options_;
  bool gelu_ = false;  // else relu
};

// num_layers copies of `layer`, as TransformerEncoder's, each called with the same memory and
// masks, then `norm` when given. PyTorch 1.13 has no tgt_is_causal or memory_is_causal here
// (2.0 added them); they reach each layer as its own flags do.
class TransformerDecoder : public Module {
 public:
  TransformerDecoder(TransformerDecoderLayer& layer, int64_t num_layers, std::shared_ptr<Module> norm = nullptr);
  Tensor forward(const Tensor& tgt, const Tensor& memory, const TransformerDecoderForwardOptions& options = {});
  Tensor operator()(const Tensor& tgt, const Tensor& memory, const TransformerDecoderForwardOptions& options = {});

  ModuleList layers;
  std::shared_ptr<Module> norm;  // null when built without one
  int64_t num_layers() const { return static_cast<int64_t>(layers.size()); }
};

}  // namespace tessera::nn
