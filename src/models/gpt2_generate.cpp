// GPT2::generate: nanoGPT's sampling loop (crop to block_size, temperature, top-k,
// multinomial), with a key/value cache. With the cache, the prompt runs once and each new
// token costs one position's forward; the tokens are the ones the full recomputation
// (use_cache = false) picks, since both compute each position's logits from the same window.
#include <algorithm>
#include <limits>

#include "tessera/autograd/grad_mode.h"
#include "tessera/models/gpt2.h"
#include "tessera/tensor/factory.h"

namespace tessera::models {

namespace {

// The next token of each row from the last position's logits [B, V]: int64 [B, 1].
Tensor pick_tokens(Tensor logits, const GenerateOptions& options, Generator& generator) {
  if (options.temperature == 0) return logits.argmax(1, /*keepdim=*/true);
  // In float64, shifted so that each row's largest logit is 0 before the division: a tiny
  // temperature (1e-300, which float32 would round to 0) then sends the others towards
  // -inf, not every logit to +-inf and the softmax to NaN, and sampling tends to greedy
  // decoding as the temperature tends to 0. [B, V] per token: the cost is nothing.
  logits = logits.to(DType::f64);
  logits = (logits - logits.amax({1}, /*keepdim=*/true)) / options.temperature;
  if (options.top_k) {
    // Keep logits >= the k-th largest of each row (ties with it stay, as nanoGPT's).
    const int64_t k = std::min(*options.top_k, logits.size(1));
    Tensor kth = std::get<0>(logits.topk(k, 1)).narrow(1, k - 1, 1);
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<double>::infinity());
  }
  return logits.softmax(1).multinomial(1, /*replacement=*/false, generator);
}

// Restores the module's training mode when generation ends (normally or by an exception).
class EvalScope {
 public:
  explicit EvalScope(nn::Module& module) : module_(module), was_training_(module.is_training()) { module.eval(); }
  ~EvalScope() { module_.train(was_training_); }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  nn::Module& module_;
  bool was_training_;
};

// Attaches a cache for a scope, detaching it however the scope ends.
class CacheScope {
 public:
  CacheScope(GPT2& model, KVCache& cache) : model_(model) { model.attach_cache(&cache); }
  ~CacheScope() { model_.attach_cache(nullptr); }
  CacheScope(const CacheScope&) = delete;
  CacheScope& operator=(const CacheScope&) = delete;

 private:
  GPT2& model_;
};

}  // namespace

Tensor GPT2::generate(const Tensor& prompt_ids, int64_t max_new_tokens, const GenerateOptions& options) {
  TS_CHECK(prompt_ids.defined() && (prompt_ids.dim() == 1 || prompt_ids.dim() == 2) && prompt_ids.dtype() == DType::i64,
           ShapeError, "GPT2::generate: expected int64 prompt ids [B, T] or [T], got ",
           prompt_ids.defined() ? detail::concat(dtype_name(prompt_ids.dtype()), " ", shape_str(prompt_ids.sizes()))
                                : "an undefined tensor");
  TS_CHECK(prompt_ids.size(-1) > 0, ValueError, "GPT2::generate: the prompt is empty (give at least one token, e.g. "
           "<|endoftext|> = 50256)");
  TS_CHECK(max_new_tokens >= 0, ValueError, "GPT2::generate: max_new_tokens must be non-negative, got ", max_new_tokens);
  TS_CHECK(options.temperature >= 0, ValueError, "GPT2::generate: temperature must be non-negative, got ",
           options.temperature);
  TS_CHECK(!options.top_k || *options.top_k > 0, ValueError, "GPT2::generate: top_k must be positive, got ",
           options.top_k.value_or(0));
  const Tensor prompt = prompt_ids.dim() == 1 ? prompt_ids.unsqueeze(0) : prompt_ids;
  TS_CHECK(prompt.size(0) > 0, ValueError, "GPT2::generate: the prompt has no rows");

  NoGradGuard no_grad;
  EvalScope eval(*this);
  Generator generator(options.seed);
  Tensor sequence = prompt;
  const int64_t block_size = config_.block_size;
  const int64_t prompt_length = prompt.size(1);
  // The cache serves while every position fits in one window.
  const bool cached = options.use_cache && prompt_length < block_size && max_new_tokens > 0;
  std::optional<KVCache> cache;
  if (cached) {
    const int64_t capacity = std::min(block_size, prompt_length + max_new_tokens);
    const Tensor& table = transformer.wte.weight;
    cache.emplace(config_, prompt.size(0), capacity, table.dtype(), table.device());
  }
  Tensor next_input = prompt;  // what the cached forward has not seen yet
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    Tensor logits;  // [B, V] at the last position
    const int64_t length = sequence.size(1);
    if (cache && length <= cache->capacity() && cache->length + next_input.size(1) == length) {
      CacheScope attached(*this, *cache);
      logits = (*this)(next_input).select(1, 0);
    } else {
      // Uncached, or the window has moved past the cache: the last block_size tokens.
      const int64_t window = std::min(length, block_size);
      Tensor out = (*this)(sequence.narrow(1, length - window, window));
      logits = out.select(1, window - 1);
    }
    Tensor token = pick_tokens(logits, options, generator);
    sequence = cat({sequence, token}, 1);
    next_input = token;
  }
  return prompt_ids.dim() == 1 ? sequence.squeeze(0) : sequence;
}

}  // namespace tessera::models
