// Differentiable scaled dot-product attention. The blocked kernels (native::) save only the
// output and the log-sum-exp of each row; the backward recomputes the weights from them. A
// floating mask that requires grad (a learned bias) takes the unblocked path instead, built
// from differentiable ops, which materialises the [L, S] weights and gives the mask its
// gradient.
#include <cmath>
#include <limits>

#include "tessera/autograd/functions/recording.h"
#include "tessera/tensor/attention_geometry.h"
#include "tessera/tensor/factory.h"

namespace tessera {

namespace {

// softmax(q k^T scale + mask) v spelled out, with the kernel's conventions: rows without a
// key give 0 (their softmax is taken of zeros, then zeroed, so no NaN reaches a gradient),
// and dropout is dropout() of the weights under the same key.
Tensor unblocked_attention(const Tensor& q, const Tensor& k, const Tensor& v, const native::AttentionOptions& o) {
  Tensor scores = matmul(q, k.transpose(-2, -1)) * o.scale + o.attn_mask;
  const TensorOptions like{.dtype = q.dtype(), .device = q.device()};
  const Tensor zero = zeros({}, like);
  const Tensor no_key = eq(scores.detach().amax({-1}, true), full({}, -std::numeric_limits<double>::infinity(), like));
  Tensor weights = where(no_key, zero, softmax(where(no_key, zero, scores), -1));
  if (o.dropout_p > 0) weights = dropout(weights, o.dropout_p, true, o.dropout_key);
  return matmul(weights, v);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const ScaledDotProductAttentionOptions& options) {
  native::AttentionOptions o;
  o.attn_mask = options.attn_mask;
  o.dropout_p = options.dropout_p;
  o.is_causal = options.is_causal;
  o.dropout_key = options.dropout_key;
  const int64_t head_dim = q.defined() && q.dim() > 0 ? q.size(-1) : 1;
  o.scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(head_dim)));
  if (options.attn_mask.defined() && needs_grad({options.attn_mask}) && !options.is_causal) {
    native::check_attention_operands(q, k, v, o, "scaled_dot_product_attention");
    return unblocked_attention(q, k, v, o);
  }
  auto [out, logsumexp] = native::scaled_dot_product_attention(q, k, v, o);
  if (needs_grad({q, k, v})) {
    o.attn_mask = saved(o.attn_mask);
    record("ScaledDotProductAttentionBackward", {q, k, v}, {out},
           [q = saved(q), k = saved(k), v = saved(v), out = saved(out), logsumexp = saved(logsumexp),
            o](const TensorList& g) {
             auto [dq, dk, dv] = native::scaled_dot_product_attention_backward(g[0], q, k, v, out, logsumexp, o);
             return TensorList{dq, dk, dv};
           });
  }
  return out;
}

}  // namespace tessera
