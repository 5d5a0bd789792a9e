#include "tessera/nn/transformer.h"

namespace tessera::nn {

namespace {

MultiheadAttentionOptions attention_options(const TransformerLayerOptions& options) {
  return {.dropout = options.dropout, .bias = options.bias, .batch_first = options.batch_first};
}

LayerNormOptions norm_options(const TransformerLayerOptions& options) {
  return {.eps = options.layer_norm_eps, .bias = options.bias};
}

// PyTorch's _get_activation_fn: "relu" or "gelu" (the exact, erf form).
bool is_gelu(const std::string& activation, const char* layer) {
  TS_CHECK(activation == "relu" || activation == "gelu", ValueError, layer, ": activation should be relu/gelu, not ",
           activation);
  return activation == "gelu";
}

void check_sizes(int64_t d_model, int64_t nhead, const TransformerLayerOptions& options, const char* layer) {
  TS_CHECK(d_model > 0 && nhead > 0 && options.dim_feedforward > 0, ValueError, layer,
           ": d_model, nhead and dim_feedforward must be positive, got ", d_model, ", ", nhead, " and ",
           options.dim_feedforward);
}

// `num_layers` copies of `layer` into `layers`, as PyTorch's _get_clones deep-copies: the same
// configuration, values, dtype, device and training mode.
template <class Layer>
void append_copies(ModuleList& layers, Layer& layer, int64_t num_layers, const char* stack) {
  TS_CHECK(num_layers > 0, ValueError, stack, ": num_layers must be positive, got ", num_layers);
  const StateDict values = layer.state_dict();
  const Tensor like = layer.self_attn.out_proj.weight;
  for (int64_t i = 0; i < num_layers; ++i) {
    auto& copy = layers.emplace<Layer>(layer.d_model(), layer.nhead(), layer.options());
    copy.to(like.dtype());
    copy.to(like.device());
    copy.load_state_dict(values);
    copy.train(layer.is_training());
  }
}

}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, const TransformerEncoderLayerOptions& options)
    : self_attn((check_sizes(d_model, nhead, options, "TransformerEncoderLayer"), d_model), nhead, attention_options(options)),
      linear1(d_model, options.dim_feedforward, {.bias = options.bias}),
      dropout(options.dropout),
      linear2(options.dim_feedforward, d_model, {.bias = options.bias}),
      norm1(d_model, norm_options(options)),
      norm2(d_model, norm_options(options)),
      dropout1(options.dropout),
      dropout2(options.dropout),
      d_model_(d_model),
      nhead_(nhead),
      options_(options),
      gelu_(is_gelu(options.activation, "TransformerEncoderLayer")) {
  register_modules({{"self_attn", self_attn}, {"linear1", linear1}, {"dropout", dropout}, {"linear2", linear2},
                    {"norm1", norm1}, {"norm2", norm2}, {"dropout1", dropout1}, {"dropout2", dropout2}});
}

Tensor TransformerEncoderLayer::operator()(const Tensor& src, const TransformerEncoderForwardOptions& options) {
  return call({src}, [this, options](std::vector<Tensor>& in) { return std::vector<Tensor>{forward(in[0], options)}; })
      .front();
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const TransformerEncoderForwardOptions& options) {
  auto self_attention_block = [&](const Tensor& x) {
    auto [attended, unused] = self_attn(x, x, x,
                                        {.key_padding_mask = options.src_key_padding_mask, .need_weights = false,
                                         .attn_mask = options.src_mask, .is_causal = options.is_causal});
    return dropout1(attended);
  };
  auto feed_forward_block = [&](const Tensor& x) {
    Tensor hidden = linear1(x);
    hidden = gelu_ ? gelu(hidden) : relu(hidden);
    return dropout2(linear2(dropout(hidden)));
  };
  Tensor x = src;
  if (options_.norm_first) {
    x = x + self_attention_block(norm1(x));
    return x + feed_forward_block(norm2(x));
  }
  x = norm1(x + self_attention_block(x));
  return norm2(x + feed_forward_block(x));
}

TransformerEncoder::TransformerEncoder(TransformerEncoderLayer& layer, int64_t num_layers, std::shared_ptr<Module> norm_module)
    : norm(std::move(norm_module)) {
  append_copies(layers, layer, num_layers, "TransformerEncoder");
  register_module("layers", layers);
  if (norm) register_module("norm", *norm);
}

Tensor TransformerEncoder::operator()(const Tensor& src, const TransformerEncoderForwardOptions& options) {
  return call({src}, [this, options](std::vector<Tensor>& in) { return std::vector<Tensor>{forward(in[0], options)}; })
      .front();
}

Tensor TransformerEncoder::forward(const Tensor& src, const TransformerEncoderForwardOptions& options) {
  Tensor x = src;
  for (Module& layer : layers) x = static_cast<TransformerEncoderLayer&>(layer)(x, options);
  return norm ? (*norm)(x) : x;
}

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model, int64_t nhead, const TransformerDecoderLayerOptions& options)
    : self_attn((check_sizes(d_model, nhead, options, "TransformerDecoderLayer"), d_model), nhead, attention_options(options)),
      multihead_attn(d_model, nhead, attention_options(options)),
      linear1(d_model, options.dim_feedforward, {.bias = options.bias}),
      dropout(options.dropout),
      linear2(options.dim_feedforward, d_model, {.bias = options.bias}),
      norm1(d_model, norm_options(options)),
      norm2(d_model, norm_options(options)),
      norm3(d_model, norm_options(options)),
      dropout1(options.dropout),
      dropout2(options.dropout),
      dropout3(options.dropout),
      d_model_(d_model),
      nhead_(nhead),
      options_(options),
      gelu_(is_gelu(options.activation, "TransformerDecoderLayer")) {
  register_modules({{"self_attn", self_attn}, {"multihead_attn", multihead_attn}, {"linear1", linear1},
                    {"dropout", dropout}, {"linear2", linear2}, {"norm1", norm1}, {"norm2", norm2}, {"norm3", norm3},
                    {"dropout1", dropout1}, {"dropout2", dropout2}, {"dropout3", dropout3}});
}

Tensor TransformerDecoderLayer::operator()(const Tensor& tgt, const Tensor& memory,
                                           const TransformerDecoderForwardOptions& options) {
  return call({tgt, memory},
              [this, options](std::vector<Tensor>& in) { return std::vector<Tensor>{forward(in[0], in[1], options)}; })
      .front();
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const TransformerDecoderForwardOptions& options) {
  auto self_attention_block = [&](const Tensor& x) {
    auto [attended, unused] = self_attn(x, x, x,
                                        {.key_padding_mask = options.tgt_key_padding_mask, .need_weights = false,
                                         .attn_mask = options.tgt_mask, .is_causal = options.tgt_is_causal});
    return dropout1(attended);
  };
  auto memory_attention_block = [&](const Tensor& x) {
    auto [attended, unused] = multihead_attn(x, memory, memory,
                                             {.key_padding_mask = options.memory_key_padding_mask,
                                              .need_weights = false, .attn_mask = options.memory_mask,
                                              .is_causal = options.memory_is_causal});
    return dropout2(attended);
  };
  auto feed_forward_block = [&](const Tensor& x) {
    Tensor hidden = linear1(x);
    hidden = gelu_ ? gelu(hidden) : relu(hidden);
    return dropout3(linear2(dropout(hidden)));
  };
  Tensor x = tgt;
  if (options_.norm_first) {
    x = x + self_attention_block(norm1(x));
    x = x + memory_attention_block(norm2(x));
    return x + feed_forward_block(norm3(x));
  }
  x = norm1(x + self_attention_block(x));
  x = norm2(x + memory_attention_block(x));
  return norm3(x + feed_forward_block(x));
}

TransformerDecoder::TransformerDecoder(TransformerDecoderLayer& layer, int64_t num_layers, std::shared_ptr<Module> norm_module)
    : norm(std::move(norm_module)) {
  append_copies(layers, layer, num_layers, "TransformerDecoder");
  register_module("layers", layers);
  if (norm) register_module("norm", *norm);
}

Tensor TransformerDecoder::operator()(const Tensor& tgt, const Tensor& memory,
                                      const TransformerDecoderForwardOptions& options) {
  return call({tgt, memory},
              [this, options](std::vector<Tensor>& in) { return std::vector<Tensor>{forward(in[0], in[1], options)}; })
      .front();
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const TransformerDecoderForwardOptions& options) {
  Tensor x = tgt;
  for (Module& layer : layers) x = static_cast<TransformerDecoderLayer&>(layer)(x, memory, options);
  return norm ? (*norm)(x) : x;
}

}  // namespace tessera::nn
