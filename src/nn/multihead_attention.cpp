#include "tessera/nn/multihead_attention.h"

#include <cmath>

#include "tessera/autograd/spatial_ops.h"
#include "tessera/nn/activation_checkpoint.h"
#include "tessera/nn/batch_scope.h"
#include "tessera/nn/init.h"
#include "tessera/tensor/factory.h"
#include "tessera/tensor/philox.h"

namespace tessera::nn {

namespace {

// xavier_uniform_ of a [fan_out, fan_in] weight: U(-b, b), b = sqrt(6 / (fan_in + fan_out)).
InitRule xavier_uniform(int64_t fan_in, int64_t fan_out) {
  const double bound = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return InitRule::uniform(-bound, bound);
}

// A mask in MultiheadAttention's convention as an additive one of `like`'s dtype: boolean
// true (not allowed) becomes -inf, floating masks are added as they are.
Tensor additive_mask(const Tensor& mask, const Tensor& like, const char* what) {
  if (mask.dtype() == DType::boolean) {
    return zeros(mask.sizes(), {.dtype = like.dtype(), .device = like.device()}).masked_fill(mask, -INFINITY);
  }
  TS_CHECK(is_floating(mask.dtype()), DTypeError, "MultiheadAttention: ", what,
           " must be boolean (true: not allowed) or floating (added to the scores), got ", mask.dtype());
  return mask.dtype() == like.dtype() ? mask : mask.to(like.dtype());
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, const MultiheadAttentionOptions& options)
    : out_proj(embed_dim > 0 ? embed_dim : 1, embed_dim > 0 ? embed_dim : 1, {.bias = options.bias}),
      embed_dim_(embed_dim),
      num_heads_(num_heads),
      kdim_(options.kdim.value_or(embed_dim)),
      vdim_(options.vdim.value_or(embed_dim)),
      options_(options) {
  TS_CHECK(embed_dim > 0 && num_heads > 0, ValueError, "MultiheadAttention: embed_dim and num_heads must be positive, got ",
           embed_dim, " and ", num_heads);
  TS_CHECK(embed_dim % num_heads == 0, ValueError, "MultiheadAttention: embed_dim must be divisible by num_heads, got ",
           embed_dim, " and ", num_heads);
  TS_CHECK(kdim_ > 0 && vdim_ > 0, ValueError, "MultiheadAttention: kdim and vdim must be positive, got ", kdim_,
           " and ", vdim_);
  TS_CHECK(options.dropout >= 0 && options.dropout <= 1, ValueError,
           "MultiheadAttention: dropout must be in [0, 1], got ", options.dropout);
  // Registration in PyTorch's order, so that state_dict() lists the same keys in the same order.
  if (kdim_ == embed_dim && vdim_ == embed_dim) {
    in_proj_weight = deferred_parameter({3 * embed_dim, embed_dim}, xavier_uniform(embed_dim, 3 * embed_dim));
    register_parameter("in_proj_weight", in_proj_weight);
  } else {
    q_proj_weight = deferred_parameter({embed_dim, embed_dim}, xavier_uniform(embed_dim, embed_dim));
    k_proj_weight = deferred_parameter({embed_dim, kdim_}, xavier_uniform(kdim_, embed_dim));
    v_proj_weight = deferred_parameter({embed_dim, vdim_}, xavier_uniform(vdim_, embed_dim));
    register_parameter("q_proj_weight", q_proj_weight);
    register_parameter("k_proj_weight", k_proj_weight);
    register_parameter("v_proj_weight", v_proj_weight);
  }
  if (options.bias) {
    in_proj_bias = deferred_parameter({3 * embed_dim}, init::zeros());
    register_parameter("in_proj_bias", in_proj_bias);
    init::set_init_rule(out_proj.bias, init::zeros());  // PyTorch's _reset_parameters zeroes it
  }
  if (options.add_bias_kv) {
    // xavier_normal_ of [1, 1, E]: fan_in = fan_out = E (the trailing dim is the receptive field).
    bias_k = deferred_parameter({1, 1, embed_dim}, init::xavier_normal(embed_dim, embed_dim));
    bias_v = deferred_parameter({1, 1, embed_dim}, init::xavier_normal(embed_dim, embed_dim));
    register_parameter("bias_k", bias_k);
    register_parameter("bias_v", bias_v);
  }
  register_module("out_proj", out_proj);
}

DropoutKey MultiheadAttention::attention_dropout_key() {
  return checkpointed_dropout_key([this]() -> DropoutKey {
    const uint64_t stream = philox::stream_of(path().empty() ? std::string("attn_dropout") : path() + ".attn_dropout");
    if (const BatchPosition* position = BatchScope::current()) {
      return {.seed = position->seed, .stream = stream, .step = position->step, .first_row = position->first_row};
    }
    return next_dropout_key(stream);
  });
}

std::tuple<Tensor, Tensor> MultiheadAttention::operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                                                          const MultiheadAttentionForwardOptions& options) {
  std::vector<Tensor> outputs = call({query, key, value}, [this, options](std::vector<Tensor>& in) {
    auto [output, weights] = forward(in[0], in[1], in[2], options);
    return std::vector<Tensor>{std::move(output), std::move(weights)};
  });
  return {std::move(outputs[0]), std::move(outputs[1])};
}

std::tuple<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query_in, const Tensor& key_in,
                                                       const Tensor& value_in,
                                                       const MultiheadAttentionForwardOptions& options) {
  TS_CHECK(query_in.defined() && key_in.defined() && value_in.defined(), ValueError,
           "MultiheadAttention: query, key and value must all be given");
  const bool batched = query_in.dim() == 3;
  TS_CHECK((query_in.dim() == 3 || query_in.dim() == 2) && key_in.dim() == query_in.dim() &&
               value_in.dim() == query_in.dim(),
           ShapeError, "MultiheadAttention: query, key and value must all be 3-D (batched) or all 2-D (unbatched), got ",
           shape_str(query_in.sizes()), ", ", shape_str(key_in.sizes()), " and ", shape_str(value_in.sizes()));
  // Everything below works in the sequence-first layout [L, N, E]; unbatched inputs get N = 1.
  const bool transposed = batched && options_.batch_first;
  auto sequence_first = [&](const Tensor& t) { return batched ? (transposed ? t.transpose(0, 1) : t) : t.unsqueeze(1); };
  const bool self_attention = query_in.is_same(key_in) && key_in.is_same(value_in);
  const Tensor query = sequence_first(query_in), key = sequence_first(key_in), value = sequence_first(value_in);
  const int64_t L = query.size(0), N = query.size(1), S = key.size(0);
  const int64_t E = embed_dim_, H = num_heads_, D = E / H;
  TS_CHECK(query.size(2) == E && key.size(2) == kdim_ && value.size(2) == vdim_, ShapeError,
           "MultiheadAttention: expected query, key and value with ", E, ", ", kdim_, " and ", vdim_,
           " features, got ", shape_str(query_in.sizes()), ", ", shape_str(key_in.sizes()), " and ",
           shape_str(value_in.sizes()));
  TS_CHECK(key.size(0) == value.size(0) && key.size(1) == N && value.size(1) == N, ShapeError,
           "MultiheadAttention: key ", shape_str(key_in.sizes()), " and value ", shape_str(value_in.sizes()),
           " must have the same sequence length, and the batch size of query ", shape_str(query_in.sizes()),
           options_.batch_first ? " (batch_first)" : "");

  // The projections: one GEMM for self-attention, as PyTorch's packed path.
  auto bias_part = [&](int64_t i) { return in_proj_bias.defined() ? in_proj_bias.narrow(0, i * E, E) : Tensor(); };
  Tensor q, k, v;
  if (in_proj_weight.defined() && self_attention) {
    std::vector<Tensor> qkv = linear(query, in_proj_weight, in_proj_bias).split(E, -1);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    auto weight_part = [&](int64_t i) {
      if (!in_proj_weight.defined()) return i == 0 ? q_proj_weight : i == 1 ? k_proj_weight : v_proj_weight;
      return in_proj_weight.narrow(0, i * E, E);
    };
    q = linear(query, weight_part(0), bias_part(0));
    k = linear(key, weight_part(1), bias_part(1));
    v = linear(value, weight_part(2), bias_part(2));
  }
  // add_bias_kv: the learned key and value after every sequence's keys.
  const int64_t extra_keys = (bias_k.defined() ? 1 : 0) + (options_.add_zero_attn ? 1 : 0);
  if (bias_k.defined()) {
    k = cat({k, bias_k.expand({1, N, E})}, 0);
    v = cat({v, bias_v.expand({1, N, E})}, 0);
  }
  // [T, N, E] -> [N, H, T, D], read in place by the attention kernel.
  auto heads = [&](const Tensor& t, int64_t T) { return t.reshape({T, N, H, D}).permute({1, 2, 0, 3}); };
  q = heads(q, L), k = heads(k, k.size(0)), v = heads(v, v.size(0));
  // add_zero_attn: a zero key and value after them, per head.
  if (options_.add_zero_attn) {
    const Tensor zero = zeros({N, H, 1, D}, {.dtype = k.dtype(), .device = k.device()});
    k = cat({k, zero}, 2);
    v = cat({v, zero}, 2);
  }

  // The masks, as one additive mask broadcasting to [N, H, L, S].
  Tensor mask;
  bool causal_in_kernel = false;
  if (options.attn_mask.defined()) {
    const Tensor& m = options.attn_mask;
    if (m.dim() == 2) {
      TS_CHECK(m.size(0) == L && m.size(1) == S, ShapeError, "MultiheadAttention: the 2-D attn_mask should be [", L,
               ", ", S, "] (target and source lengths), got ", shape_str(m.sizes()));
      mask = additive_mask(m, q, "attn_mask").view({1, 1, L, S});
    } else {
      TS_CHECK(m.dim() == 3 && m.size(0) == N * H && m.size(1) == L && m.size(2) == S, ShapeError,
               "MultiheadAttention: attn_mask should be [", L, ", ", S, "] or [", N * H, ", ", L, ", ", S,
               "] (batch * num_heads, target, source), got ", shape_str(m.sizes()));
      mask = additive_mask(m, q, "attn_mask").reshape({N, H, L, S});
    }
  } else if (options.is_causal) {
    if (!options.key_padding_mask.defined() && !options.need_weights && extra_keys == 0) {
      causal_in_kernel = true;
    } else {
      Tensor future = ones({L, S}, {.dtype = DType::boolean, .device = q.device()}).triu(1);
      mask = additive_mask(future, q, "attn_mask").view({1, 1, L, S});
    }
  }
  if (options.key_padding_mask.defined()) {
    const Tensor& m = options.key_padding_mask;
    const bool fits = batched ? (m.dim() == 2 && m.size(0) == N && m.size(1) == S) : (m.dim() == 1 && m.size(0) == S);
    TS_CHECK(fits, ShapeError, "MultiheadAttention: key_padding_mask should be ",
             batched ? shape_str({N, S}) : shape_str({S}), " (batch, source length), got ", shape_str(m.sizes()));
    Tensor padding = additive_mask(m, q, "key_padding_mask").reshape({N, 1, 1, S});
    mask = mask.defined() ? mask + padding : padding;
  }
  // The masks cover the S keys given; the appended keys are allowed (PyTorch pads with 0 and false).
  if (mask.defined() && extra_keys > 0) mask = pad(mask, {0, extra_keys});

  const double dropout_p = is_training() ? options_.dropout : 0.0;
  const DropoutKey dropout_key = dropout_p > 0 ? attention_dropout_key() : DropoutKey{};
  Tensor attended, weights;
  if (options.need_weights) {
    Tensor scores = matmul(q * (1.0 / std::sqrt(static_cast<double>(D))), k.transpose(-2, -1));
    if (mask.defined()) scores = scores + mask;
    weights = softmax(scores, -1);
    if (dropout_p > 0) weights = dropout(weights, dropout_p, true, dropout_key);
    attended = matmul(weights, v);
  } else {
    attended = tessera::scaled_dot_product_attention(
        q, k, v, {.attn_mask = mask, .dropout_p = dropout_p, .is_causal = causal_in_kernel, .dropout_key = dropout_key});
  }
  // [N, H, L, D] -> [L, N, E] or [N, L, E], then the output projection.
  Tensor output = transposed ? out_proj(attended.transpose(1, 2).reshape({N, L, E}))
                             : out_proj(attended.permute({2, 0, 1, 3}).reshape({L, N, E}));
  if (!batched) output = output.squeeze(1);
  if (weights.defined()) {
    if (options.average_attn_weights) weights = weights.sum({1}) / static_cast<double>(H);
    if (!batched) weights = weights.squeeze(0);
  }
  return {output, weights};
}

}  // namespace tessera::nn
