// Moving GPT-2 weights to and from Hugging Face. HF's GPT2LMHeadModel state dict is
// "transformer.<GPT2Model's names>" plus lm_head.weight (the same tensor as wte); the hub's
// model.safetensors holds GPT2Model's names without the prefix, and older files also the
// causal-mask buffers h.N.attn.bias ([1, 1, n_positions, n_positions]) and
// h.N.attn.masked_bias (a scalar). Conv1D weights are [in, out] on both sides: no transposes.
#include <optional>
#include <regex>
#include <utility>

#include "tessera/io/json.h"
#include "tessera/io/safetensors.h"
#include "tessera/models/gpt2.h"

namespace tessera::models {

namespace {

constexpr std::string_view kPrefix = "transformer.";
constexpr std::string_view kHead = "lm_head.weight";
constexpr std::string_view kTable = "transformer.wte.weight";

bool has_prefix(std::string_view key) { return key.substr(0, kPrefix.size()) == kPrefix; }

// h.N.attn.bias and h.N.attn.masked_bias: buffers GPT-2's attention computes from its size.
bool is_mask_buffer(const std::string& key) {
  static const std::regex pattern(R"(h\.[0-9]+\.attn\.(bias|masked_bias))");
  return std::regex_match(key, pattern);
}

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  return (a.to(DType::f64) != b.to(DType::f64)).sum().item<int64_t>() == 0;
}

}  // namespace

StateDict gpt2_state_dict_from_hf(const StateDict& hf_state) {
  StateDict out;
  const Tensor* head = nullptr;
  for (const auto& [key, tensor] : hf_state) {
    if (key == kHead) {
      head = &tensor;
      continue;
    }
    const std::string name = has_prefix(key) ? key : std::string(kPrefix) + key;
    if (is_mask_buffer(name.substr(kPrefix.size()))) continue;
    out.insert(name, tensor);
  }
  if (head != nullptr && out.contains(std::string(kTable))) {
    // A NaN differs even from itself: name it as what it is, not as an untied head.
    for (const auto& [name, tensor] : {std::pair{std::string(kHead), *head},
                                       std::pair{std::string(kTable), out.at(std::string(kTable))}}) {
      const std::optional<int64_t> bad = first_non_finite(tensor);
      TS_CHECK(!bad.has_value(), ValueError, "gpt2_state_dict_from_hf: ", name, " ", shape_str(tensor.sizes()),
               " is not finite: element ", bad.value_or(0), " (flat index) is ",
               bad ? tensor.flatten().select(0, *bad).to(DType::f64).item<double>() : 0.0,
               ", so it cannot be checked against the tied ", name == kHead ? kTable : kHead);
    }
    TS_CHECK(same_values(*head, out.at(std::string(kTable))), ValueError,
             "gpt2_state_dict_from_hf: lm_head.weight ", shape_str(head->sizes()), " differs from ", kTable, " ",
             shape_str(out.at(std::string(kTable)).sizes()),
             "; this GPT2's head is tied to the token embeddings (as GPT-2's), so an untied head cannot load");
  } else if (head != nullptr) {
    out.insert(std::string(kHead), *head);  // no table to compare with: load_state_dict names it
  }
  return out;
}

void GPT2::load_hf_state_dict(const StateDict& hf_state) { load_state_dict(gpt2_state_dict_from_hf(hf_state)); }

void save_gpt2_safetensors(const StateDict& state, const std::string& path) {
  for (const auto& [key, tensor] : state) {
    TS_CHECK(has_prefix(key), ValueError, "save_gpt2_safetensors: '", key,
             "' is not a GPT2 parameter name (they start with 'transformer.')");
  }
  TS_CHECK(state.contains(std::string(kTable)), ValueError, "save_gpt2_safetensors: the state has no ", kTable,
           " (pass model.state_dict() or fsdp::full_state_dict(model))");
  io::save(state, path, {{"format", "pt"}});
}

std::string hf_config_json(const GPTConfig& config) {
  config.check();
  TS_CHECK(config.bias, ValueError,
           "hf_config_json: Hugging Face's GPT2 has biases in every layer; a model built with bias = false has no "
           "GPT2Config");
  namespace json = io::json;
  json::Object object{
      {"architectures", json::Array{"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"activation_function", "gelu_new"},
      {"n_layer", config.n_layer},
      {"n_head", config.n_head},
      {"n_embd", config.n_embd},
      {"n_positions", config.block_size},
      {"n_ctx", config.block_size},
      {"vocab_size", config.vocab_size},
      {"embd_pdrop", config.dropout},
      {"attn_pdrop", config.dropout},
      {"resid_pdrop", config.dropout},
      {"layer_norm_epsilon", 1e-5},
      {"initializer_range", 0.02},
      {"scale_attn_weights", true},
      {"tie_word_embeddings", true},
      {"bos_token_id", 50256},
      {"eos_token_id", 50256},
  };
  return json::write(json::Value(std::move(object))) + "\n";
}

}  // namespace tessera::models
