// torch.nn.MultiheadAttention: PyTorch's parameter names, defaults, initialisation and
// masks.
//
//   ts::nn::MultiheadAttention attention(64, 8, {.batch_first = true});
//   auto [out, weights] = attention(x, x, x);                       // weights [N, L, S], head-averaged
//   auto [y, none] = attention(x, x, x, {.need_weights = false});   // fused attention, no weights
//
// Parameters: in_proj_weight [3E, E] (xavier_uniform_), in_proj_bias [3E] (zeros),
// out_proj.weight [E, E] (Linear's init), out_proj.bias [E] (zeros); with kdim or vdim other
// than embed_dim, q_proj_weight [E, E], k_proj_weight [E, kdim] and v_proj_weight [E, vdim]
// take in_proj_weight's place, as in PyTorch. add_bias_kv adds bias_k and bias_v [1, 1, E]
// (xavier_normal_), a learned key and value appended to every sequence after the projections;
// add_zero_attn appends a zero key and value to every head after that. Masks are given for
// the keys passed in and allow the appended ones.
#pragma once

#include <optional>
#include <tuple>

#include "tessera/autograd/functions.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

struct MultiheadAttentionOptions {
  double dropout = 0.0;  // on the attention weights, in training mode only
  bool bias = true;      // in_proj_bias and out_proj.bias
  bool add_bias_kv = false;    // bias_k and bias_v: a learned key and value appended to the keys
  bool add_zero_attn = false;  // a zero key and value appended to every head's keys
  std::optional<int64_t> kdim{};  // key features; embed_dim when unset
  std::optional<int64_t> vdim{};  // value features; embed_dim when unset
  bool batch_first = false;       // [N, L, E] instead of PyTorch's default [L, N, E]
};

// The arguments of forward() after query, key and value, in PyTorch's order.
//
// Masks follow PyTorch's MultiheadAttention (the opposite of scaled_dot_product_attention's
// boolean convention): a boolean mask is true where attention is NOT allowed; a floating
// mask (the query's dtype) is added to the scores. key_padding_mask is [N, S] ([S]
// unbatched); attn_mask is [L, S] or [N * num_heads, L, S]. Both may be given; they add.
struct MultiheadAttentionForwardOptions {
  Tensor key_padding_mask{};
  bool need_weights = true;  // false: ts::scaled_dot_product_attention, no weights returned
  Tensor attn_mask{};
  bool average_attn_weights = true;  // weights [N, L, S] averaged over heads, else [N, H, L, S]
  // With attn_mask, a hint that it is causal (it is used as given). Without one, the causal
  // mask (key j <= query i) is applied; PyTorch raises there instead.
  bool is_causal = false;
};

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, const MultiheadAttentionOptions& options = {});

  // query [L, N, E] ([N, L, E] with batch_first, [L, E] unbatched), key [S, N, kdim], value
  // [S, N, vdim]. Returns the output (query's layout) and, with need_weights, the attention
  // weights [N, L, S] or [N, H, L, S] ([L, S] or [H, L, S] unbatched); otherwise an undefined
  // tensor. With need_weights the weights are formed and softmaxed explicitly (a query whose
  // every key is masked gets NaN, as in PyTorch); without, the fused kernel gives it 0.
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const MultiheadAttentionForwardOptions& options = {});
  // forward() through Module::call: hooks see (query, key, value) and (output, weights), so
  // FSDP gathers a sharded attention's parameters for it and registers its backward.
  std::tuple<Tensor, Tensor> operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                                        const MultiheadAttentionForwardOptions& options = {});
  // No extra_repr: PyTorch prints MultiheadAttention with its out_proj only.

  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }
  const MultiheadAttentionOptions& options() const { return options_; }

  Tensor in_proj_weight;  // [3E, E]; undefined with kdim or vdim other than embed_dim
  Tensor q_proj_weight, k_proj_weight, v_proj_weight;  // defined only then
  Tensor in_proj_bias;    // [3E]; undefined without bias
  Tensor bias_k, bias_v;  // [1, 1, E]; defined only with add_bias_kv
  Linear out_proj;

 private:
  // The key of this call's attention dropout, keyed as a Dropout at "<path>.attn_dropout"
  // would key its own (BatchScope, checkpoint replay), so masks do not depend on rank count.
  DropoutKey attention_dropout_key();

  int64_t embed_dim_, num_heads_, kdim_, vdim_;
  MultiheadAttentionOptions options_;
};

}  // namespace tessera::nn
