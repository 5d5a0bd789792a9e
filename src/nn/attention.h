// Attention whose dropout belongs to a module: the form a model's forward() calls.
//
//   struct SelfAttention : ts::nn::Module {
//     ts::nn::Dropout attn_dropout{0.1};
//     ...
//     ts::Tensor forward(ts::Tensor x) override {
//       ...  // q, k, v [B, H, T, D]
//       return ts::nn::scaled_dot_product_attention(q, k, v, attn_dropout, {.is_causal = true});
//     }
//   };
#pragma once

#include "tessera/autograd/functions.h"
#include "tessera/nn/layers.h"

namespace tessera::nn {

// ts::scaled_dot_product_attention with dropout_p and dropout_key taken from `dropout`: its
// p in training mode and none in eval, masks keyed as `dropout` keys its own (see
// batch_scope.h), so the weights dropped are the very ones `dropout(weights)` would drop in
// the unfused form softmax(...) -> dropout -> matmul. options.dropout_p and .dropout_key are
// overwritten.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, Dropout& dropout,
                                    ScaledDotProductAttentionOptions options = {});

}  // namespace tessera::nn
