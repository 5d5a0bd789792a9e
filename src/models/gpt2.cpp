// GPT-2's modules: registered in GPT2LMHeadModel's order, so state_dict() lists HF's names
// in HF's order, and initialised as GPT-2 (HF's _init_weights, nanoGPT's _init_weights).
#include "tessera/models/gpt2.h"

#include <cmath>
#include <limits>
#include <optional>

#include "tessera/nn/attention.h"
#include "tessera/nn/init.h"
#include "tessera/tensor/factory.h"

namespace tessera::models {

namespace {

constexpr double kInitStd = 0.02;  // HF's initializer_range

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The config, checked before the first layer is built from it.
const GPTConfig& checked(const GPTConfig& config) {
  config.check();
  return config;
}

nn::LayerNorm layer_norm(const GPTConfig& config) {
  return nn::LayerNorm(config.n_embd, {.eps = 1e-5, .bias = config.bias});
}

}  // namespace

// ---- GPTConfig ----

GPTConfig GPTConfig::preset(std::string_view name) {
  const std::string key = lower(name);
  if (key == "gpt2") return {.n_layer = 12, .n_head = 12, .n_embd = 768};
  if (key == "gpt2-medium") return {.n_layer = 24, .n_head = 16, .n_embd = 1024};
  if (key == "gpt2-large") return {.n_layer = 36, .n_head = 20, .n_embd = 1280};
  if (key == "gpt2-xl") return {.n_layer = 48, .n_head = 25, .n_embd = 1600};
  throw ValueError(detail::concat("GPTConfig::preset: unknown preset '", name,
                                  "'; the presets are gpt2, gpt2-medium, gpt2-large and gpt2-xl"));
}

std::vector<std::string> GPTConfig::preset_names() { return {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"}; }

namespace {

// a * b + c, or nullopt past int64's range.
std::optional<int64_t> multiply_add(int64_t a, int64_t b, int64_t c) {
  int64_t product = 0, sum = 0;
  if (__builtin_mul_overflow(a, b, &product) || __builtin_add_overflow(product, c, &sum)) return std::nullopt;
  return sum;
}

}  // namespace

std::optional<int64_t> GPTConfig::checked_num_parameters() const {
  if (n_layer < 0 || n_embd < 0 || block_size < 0 || vocab_size < 0) return std::nullopt;
  const int64_t c = n_embd, b = bias ? 1 : 0;
  // Per block: 2 LayerNorms (c + b c each), c_attn (3 c^2 + 3 b c), attn.c_proj (c^2 + b c),
  // c_fc (4 c^2 + 4 b c), mlp.c_proj (4 c^2 + b c): 12 c^2 + (2 + 11 b) c.
  const std::optional<int64_t> squares = multiply_add(c, c, 0);
  if (!squares) return std::nullopt;
  const std::optional<int64_t> per_block = multiply_add(12, *squares, (2 + 11 * b) * c);
  if (!per_block) return std::nullopt;
  // wte, wpe, the blocks, ln_f.
  std::optional<int64_t> total = multiply_add(vocab_size, c, c + b * c);
  if (total) total = multiply_add(block_size, c, *total);
  if (total) total = multiply_add(n_layer, *per_block, *total);
  return total;
}

int64_t GPTConfig::num_parameters() const {
  const std::optional<int64_t> count = checked_num_parameters();
  TS_CHECK(count.has_value(), ValueError, "GPTConfig: n_layer ", n_layer, ", n_embd ", n_embd, ", block_size ",
           block_size, " and vocab_size ", vocab_size, " make more than ", std::numeric_limits<int64_t>::max(),
           " parameters (int64's largest)");
  return *count;
}

void GPTConfig::check() const {
  TS_CHECK(n_layer > 0 && n_head > 0 && n_embd > 0 && block_size > 0 && vocab_size > 0, ValueError,
           "GPTConfig: n_layer, n_head, n_embd, block_size and vocab_size must be positive, got ", n_layer, ", ", n_head,
           ", ", n_embd, ", ", block_size, ", ", vocab_size);
  TS_CHECK(n_embd % n_head == 0, ValueError, "GPTConfig: n_embd (", n_embd, ") must be a multiple of n_head (", n_head,
           ")");
  TS_CHECK(dropout >= 0 && dropout < 1, ValueError, "GPTConfig: dropout must be in [0, 1), got ", dropout);
  num_parameters();  // within int64
}

// ---- Conv1D ----

Conv1D::Conv1D(int64_t nf, int64_t nx, bool with_bias) : nf_(nf), nx_(nx) {
  TS_CHECK(nf > 0 && nx > 0, ValueError, "Conv1D: nf and nx must be positive, got ", nf, " and ", nx);
  weight = deferred_parameter({nx, nf}, InitRule::normal(0.0, kInitStd));
  register_parameter("weight", weight);
  if (with_bias) {
    bias = deferred_parameter({nf}, nn::init::zeros());
    register_parameter("bias", bias);
  }
}

// x W + b is linear() with W^T, which reads W [in, out] in place as the transposed operand.
// HF's addmm(bias, x.view(-1, nx), weight): one 2-D product that reads weight [nx, nf] as it
// is stored and whose weight gradient x^T g comes out in that layout (linear(x, weight.t())
// would make it [nf, nx] and then copy it, transposed, into weight.grad: 10% of a GPT-2 step).
Tensor Conv1D::forward(Tensor input) {
  Shape out_shape = input.sizes();
  TS_CHECK(!out_shape.empty() && out_shape.back() == nx_, ShapeError, "Conv1D: expected [..., ", nx_, "], got ",
           shape_str(out_shape));
  out_shape.back() = nf_;
  Tensor y = input.reshape({-1, nx_}).matmul(weight);
  if (bias.defined()) y = y + bias;
  return y.view(out_shape);
}

std::string Conv1D::extra_repr() const {
  return detail::concat("nf=", nf_, ", nx=", nx_, bias.defined() ? "" : ", bias=False");
}

// ---- KVCache ----

KVCache::KVCache(const GPTConfig& config, int64_t batch, int64_t capacity, DType dtype, Device device) {
  TS_CHECK(batch > 0 && capacity > 0 && capacity <= config.block_size, ValueError, "KVCache: batch (", batch,
           ") must be positive and capacity (", capacity, ") in [1, block_size = ", config.block_size, "]");
  const Shape shape{batch, config.n_head, capacity, config.n_embd / config.n_head};
  for (int64_t layer = 0; layer < config.n_layer; ++layer) {
    keys.push_back(empty(shape, {.dtype = dtype, .device = device}));
    values.push_back(empty(shape, {.dtype = dtype, .device = device}));
  }
}

// ---- GPT2Attention ----

GPT2Attention::GPT2Attention(const GPTConfig& config)
    : c_attn(3 * config.n_embd, config.n_embd, config.bias),
      c_proj(config.n_embd, config.n_embd, config.bias),
      attn_dropout(config.dropout),
      resid_dropout(config.dropout),
      n_head_(config.n_head),
      n_embd_(config.n_embd) {
  register_modules({{"c_attn", c_attn}, {"c_proj", c_proj}, {"attn_dropout", attn_dropout},
                    {"resid_dropout", resid_dropout}});
}

void GPT2Attention::set_cache(KVCache* cache, int64_t layer) {
  cache_ = cache;
  layer_ = layer;
}

Tensor GPT2Attention::forward(Tensor x) {
  TS_CHECK(x.defined() && x.dim() == 3 && x.size(2) == n_embd_, ShapeError, "GPT2Attention: expected [B, T, ", n_embd_,
           "], got ", x.defined() ? shape_str(x.sizes()) : std::string("an undefined tensor"));
  const int64_t batch = x.size(0), length = x.size(1), head_size = n_embd_ / n_head_;
  std::vector<Tensor> qkv = c_attn(x).split(n_embd_, 2);
  auto heads = [&](const Tensor& t) { return t.reshape({batch, length, n_head_, head_size}).transpose(1, 2); };
  Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);

  Tensor y;
  if (cache_ == nullptr) {
    y = nn::scaled_dot_product_attention(q, k, v, attn_dropout, {.is_causal = true});
  } else {
    // The new positions p..p+t-1 go after the cached 0..p-1; position p+i sees keys j <= p+i.
    const int64_t past = cache_->length, total = past + length;
    TS_CHECK(total <= cache_->capacity() && cache_->keys[layer_].size(0) == batch, ValueError,
             "GPT2Attention: the cache holds ", cache_->capacity(), " positions of ", cache_->keys[layer_].size(0),
             " rows; got ", length, " more after ", past, " for ", batch, " rows");
    cache_->keys[layer_].narrow(2, past, length).copy_(k);
    cache_->values[layer_].narrow(2, past, length).copy_(v);
    Tensor keys = cache_->keys[layer_].narrow(2, 0, total), values = cache_->values[layer_].narrow(2, 0, total);
    ScaledDotProductAttentionOptions options;
    if (past == 0) {
      options.is_causal = length > 1;
    } else if (length > 1) {
      const TensorOptions positions{.dtype = DType::i64, .device = x.device()};
      options.attn_mask = arange(total, positions).view({1, total}) <= arange(past, total, 1, positions).view({length, 1});
    }
    y = nn::scaled_dot_product_attention(q, keys, values, attn_dropout, options);
  }
  y = y.transpose(1, 2).reshape({batch, length, n_embd_});
  return resid_dropout(c_proj(y));
}

// ---- GPT2MLP, GPT2Block ----

GPT2MLP::GPT2MLP(const GPTConfig& config)
    : c_fc(4 * config.n_embd, config.n_embd, config.bias),
      c_proj(config.n_embd, 4 * config.n_embd, config.bias),
      dropout(config.dropout) {
  register_modules({{"c_fc", c_fc}, {"c_proj", c_proj}, {"act", act}, {"dropout", dropout}});
}

GPT2Block::GPT2Block(const GPTConfig& config)
    : ln_1(layer_norm(config)), attn(config), ln_2(layer_norm(config)), mlp(config) {
  register_modules({{"ln_1", ln_1}, {"attn", attn}, {"ln_2", ln_2}, {"mlp", mlp}});
}

Tensor GPT2Block::forward(Tensor x) {
  x = x + attn(ln_1(x));
  return x + mlp(ln_2(x));
}

// ---- GPT2Model ----

GPT2Model::GPT2Model(const GPTConfig& config)
    : wte(checked(config).vocab_size, config.n_embd),
      wpe(config.block_size, config.n_embd),
      drop(config.dropout),
      ln_f(layer_norm(config)),
      config_(config) {
  for (int64_t i = 0; i < config.n_layer; ++i) h.emplace<GPT2Block>(config);
  register_modules({{"wte", wte}, {"wpe", wpe}, {"drop", drop}, {"h", h}, {"ln_f", ln_f}});
}

void GPT2Model::set_cache(KVCache* cache) {
  TS_CHECK(cache == nullptr || static_cast<int64_t>(cache->keys.size()) == config_.n_layer, ValueError,
           "GPT2Model: the cache has ", cache ? cache->keys.size() : 0, " layers, the model ", config_.n_layer);
  cache_ = cache;
  int64_t layer = 0;
  for (nn::Module& block : h) static_cast<GPT2Block&>(block).attn.set_cache(cache, layer++);
}

Tensor GPT2Model::forward(Tensor ids) {
  TS_CHECK(ids.defined() && ids.dim() == 2 && ids.dtype() == DType::i64, ShapeError,
           "GPT2Model: expected int64 token ids [B, T], got ",
           ids.defined() ? detail::concat(dtype_name(ids.dtype()), " ", shape_str(ids.sizes())) : "an undefined tensor");
  const int64_t past = cache_ ? cache_->length : 0, length = ids.size(1);
  TS_CHECK(past + length <= config_.block_size, ValueError, "GPT2Model: ", past + length,
           " positions exceed block_size ", config_.block_size);
  Tensor positions = arange(past, past + length, 1, {.dtype = DType::i64, .device = ids.device()});
  Tensor x = drop(wte(ids) + wpe(positions));
  for (nn::Module& block : h) x = block(x);
  if (cache_) cache_->length += length;
  return ln_f(x);
}

// ---- TiedLinear, GPT2 ----

TiedLinear::TiedLinear(nn::Embedding& tied_to, std::string tied_name)
    : tied_to_(tied_to), tied_name_(std::move(tied_name)) {}

Tensor TiedLinear::forward(Tensor input) {
  const Tensor& weight = tied_to_.weight;
  TS_CHECK(weight.numel() == 0 || weight.storage()->nbytes() > 0, ValueError, "lm_head: its weight is ", tied_name_,
           ", whose memory FSDP released after its own unit's forward. Tied weights must be in one unit with the "
           "head: shard GPT2 with one unit per block and the embeddings with the root, "
           "FullyShardOptions{.wrap_policy = WrapPolicy::module_type({\"GPT2Block\"})}");
  return linear(input, weight);
}

std::string TiedLinear::extra_repr() const {
  return detail::concat("in_features=", tied_to_.embedding_dim(), ", out_features=", tied_to_.num_embeddings(),
                        ", bias=False, weight=", tied_name_);
}

GPT2::GPT2(const GPTConfig& config) : transformer(config), lm_head(transformer.wte, "transformer.wte.weight"), config_(config) {
  register_modules({{"transformer", transformer}, {"lm_head", lm_head}});
  // GPT-2's initialisation over the layers' defaults.
  nn::init::set_init_rule(transformer.wte.weight, InitRule::normal(0.0, kInitStd));
  nn::init::set_init_rule(transformer.wpe.weight, InitRule::normal(0.0, kInitStd));
  const InitRule residual = InitRule::normal(0.0, kInitStd / std::sqrt(2.0 * static_cast<double>(config.n_layer)));
  for (nn::Module& module : transformer.h) {
    auto& block = static_cast<GPT2Block&>(module);
    nn::init::set_init_rule(block.attn.c_proj.weight, residual);
    nn::init::set_init_rule(block.mlp.c_proj.weight, residual);
  }
}

void GPT2::attach_cache(KVCache* cache) {
  transformer.set_cache(cache);
  cache_ = cache;
}

Tensor GPT2::forward(Tensor ids) {
  Tensor hidden = transformer(ids);
  if (cache_) hidden = hidden.narrow(1, hidden.size(1) - 1, 1);
  return lm_head(hidden);
}

Tensor GPT2::forward(Tensor ids, const Tensor& targets, const CrossEntropyOptions& options) {
  TS_CHECK(targets.defined() && targets.sizes() == ids.sizes(), ShapeError, "GPT2: targets of shape ",
           targets.defined() ? shape_str(targets.sizes()) : std::string("undefined"), " for ids of shape ",
           shape_str(ids.sizes()), "; give one target token per position");
  TS_CHECK(cache_ == nullptr, ValueError, "GPT2: forward(ids, targets) with a KV cache attached; detach it first");
  Tensor logits = (*this)(std::move(ids));
  return cross_entropy(logits.flatten(0, -2), targets.flatten(), options);
}

}  // namespace tessera::models
