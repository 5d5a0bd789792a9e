// nn::MultiheadAttention, TransformerEncoderLayer, TransformerEncoder,
// TransformerDecoderLayer and TransformerDecoder against PyTorch 1.13
// (tests/nn/make_mha_reference.py writes tests/nn/mha_reference.safetensors, and
// mha_extra_keys_reference.safetensors for add_bias_kv and add_zero_attn): PyTorch's
// state_dict loads by its own names, and the outputs, attention weights and the gradients of
// every input and parameter match, for the masks, layouts and options PyTorch takes. Then a small TransformerEncoder classifier learns a task
// that needs attention.
//
// Tolerances, relative to each tensor's largest magnitude (or absolute below 1). float64:
// 1e-10. Both sides compute the same formulas; only the order of the sums differs (GEMM
// blockings; the fused kernel's online softmax against PyTorch's explicit one), which
// moves results by a few ulps times the depth of the computation (sums of at most 32 terms,
// at most nine attentions, LayerNorms and feed-forward blocks in a row, in the three-layer
// decoder stack): measured 1.2e-15 for MultiheadAttention, 7.5e-16 for single layers and
// 1.6e-15 for the decoder stacks, so 1e-10 says "the same computation" with room for any
// summation order while a wrong mask, scale or layout shows up as an O(1e-2) error. float32: 1e-5, the same
// differences at float32's 6e-8 rounding.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <span>
#include <tessera/tessera.h>

#include "test_support.h"

namespace ts = tessera;
namespace nn = tessera::nn;
using test_support::contains;
using test_support::error_of;
using ts::DType;
using ts::Tensor;

namespace {

const ts::StateDict& reference() {
  static const ts::StateDict file = [] {
    const char* dir = std::getenv("TESSERA_SOURCE_DIR");
    REQUIRE_MESSAGE(dir != nullptr, "TESSERA_SOURCE_DIR is not set (meson test sets it)");
    ts::StateDict merged = ts::io::load(std::string(dir) + "/tests/nn/mha_reference.safetensors");
    // add_bias_kv and add_zero_attn's cases (a file of their own: the first is at the size limit).
    for (const auto& [key, tensor] : ts::io::load(std::string(dir) + "/tests/nn/mha_extra_keys_reference.safetensors"))
      merged.insert(key, tensor);
    return merged;
  }();
  return file;
}

// The case's entries, by name after "<case>/".
struct Case {
  std::string name;
  Tensor at(const std::string& entry) const { return reference().at(name + "/" + entry); }
  bool has(const std::string& entry) const { return reference().contains(name + "/" + entry); }
  Tensor mask(const std::string& entry) const { return has("mask/" + entry) ? at("mask/" + entry) : Tensor(); }
  Tensor input(const std::string& entry) const { return at("input/" + entry).clone().requires_grad_(); }
  ts::StateDict state() const {
    ts::StateDict state;
    const std::string prefix = name + "/state/";
    for (const auto& [key, tensor] : reference())
      if (key.rfind(prefix, 0) == 0) state.insert(key.substr(prefix.size()), tensor);
    return state;
  }
};

std::vector<std::string> sorted(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  return names;
}

// Loads the case's state_dict by PyTorch's names (strict: the same keys), after checking
// that the module's own keys are PyTorch's.
void load_reference_state(nn::Module& module, const Case& c, DType dtype) {
  module.to(dtype);
  const ts::StateDict state = c.state();
  CHECK(sorted(module.state_dict().keys()) == sorted(state.keys()));
  module.load_state_dict(state);
}

// Backpropagates the stored upstream gradients from the output (and the weights), then
// compares output, weights and every gradient with PyTorch's; returns the largest error.
double compare(nn::Module& module, const Case& c, const Tensor& output, const Tensor& weights,
               const std::vector<std::pair<std::string, Tensor>>& inputs, double tolerance) {
  Tensor loss = (output * c.at("grad_output")).sum();
  if (c.has("weights")) {
    REQUIRE(weights.defined());
    loss = loss + (weights * c.at("grad_weights")).sum();
  } else {
    CHECK_FALSE(weights.defined());
  }
  loss.backward();
  double worst = test_support::largest_error(output, c.at("output"));
  CHECK(worst <= tolerance);
  if (c.has("weights")) {
    const double error = test_support::largest_error(weights, c.at("weights"));
    CHECK(error <= tolerance);
    worst = std::max(worst, error);
  }
  for (const auto& [name, input] : inputs) {
    CAPTURE(name);
    const double error = test_support::largest_error(input.grad(), c.at("grad/input/" + name));
    CHECK(error <= tolerance);
    worst = std::max(worst, error);
  }
  for (const auto& [name, parameter] : module.named_parameters()) {
    CAPTURE(name);
    const double error = test_support::largest_error(parameter.grad(), c.at("grad/" + name));
    CHECK(error <= tolerance);
    worst = std::max(worst, error);
  }
  MESSAGE(c.name << ": largest difference from PyTorch " << worst);
  return worst;
}

// The cases of make_mha_reference.py's MultiheadAttention table.
struct AttentionCase {
  std::string name;
  DType dtype = DType::f64;
  nn::MultiheadAttentionOptions options{};
  bool need_weights = true;
  bool average_attn_weights = true;
};

constexpr double f64_tolerance = 1e-10;
constexpr double f32_tolerance = 1e-5;

double run_attention_case(const AttentionCase& spec, bool causal_flag_for_mask = false) {
  const Case c{spec.name};
  CAPTURE(c.name);
  nn::MultiheadAttention attention(16, 4, spec.options);
  load_reference_state(attention, c, spec.dtype);
  std::vector<std::pair<std::string, Tensor>> inputs{{"query", c.input("query")}};
  Tensor query = inputs[0].second, key = query, value = query;
  if (c.has("input/key")) {
    key = c.input("key");
    inputs.emplace_back("key", key);
    value = key;
  }
  if (c.has("input/value")) {
    value = c.input("value");
    inputs.emplace_back("value", value);
  }
  nn::MultiheadAttentionForwardOptions call{.key_padding_mask = c.mask("key_padding_mask"),
                                            .need_weights = spec.need_weights,
                                            .attn_mask = c.mask("attn_mask"),
                                            .average_attn_weights = spec.average_attn_weights};
  if (causal_flag_for_mask) call.attn_mask = Tensor(), call.is_causal = true;  // the flag instead of the causal mask
  auto [output, weights] = attention(query, key, value, call);
  return compare(attention, c, output, weights, inputs, spec.dtype == DType::f64 ? f64_tolerance : f32_tolerance);
}

const std::vector<AttentionCase>& attention_cases() {
  static const std::vector<AttentionCase> cases{
      {.name = "mha_seq_first_padding"},
      {.name = "mha_seq_first_padding_f32", .dtype = DType::f32},
      {.name = "mha_batch_first_float_mask", .options = {.batch_first = true}, .average_attn_weights = false},
      {.name = "mha_batch_first_causal_no_weights", .options = {.batch_first = true}, .need_weights = false},
      {.name = "mha_cross_3d_mask_padding"},
      {.name = "mha_causal_padding_no_weights", .need_weights = false},
      {.name = "mha_unbatched", .average_attn_weights = false},
      {.name = "mha_kdim_vdim", .options = {.kdim = 10, .vdim = 12, .batch_first = true}},
      {.name = "mha_no_bias", .options = {.bias = false}, .need_weights = false},
      {.name = "mha_bias_kv", .options = {.add_bias_kv = true}},
      {.name = "mha_zero_attn_causal", .options = {.add_zero_attn = true, .batch_first = true},
       .average_attn_weights = false},
      {.name = "mha_bias_kv_zero_attn_cross",
       .options = {.add_bias_kv = true, .add_zero_attn = true, .kdim = 10, .vdim = 12},
       .need_weights = false},
      {.name = "mha_bias_kv_unbatched", .options = {.add_bias_kv = true, .add_zero_attn = true}},
  };
  return cases;
}

}  // namespace

TEST_CASE("MultiheadAttention matches PyTorch 1.13: outputs, weights and gradients, every mask and layout") {
  double worst_f64 = 0, worst_f32 = 0;
  for (const AttentionCase& spec : attention_cases()) {
    double& worst = spec.dtype == DType::f64 ? worst_f64 : worst_f32;
    worst = std::max(worst, run_attention_case(spec));
  }
  MESSAGE("MultiheadAttention, largest difference from PyTorch: float64 " << worst_f64 << ", float32 " << worst_f32);
}

TEST_CASE("MultiheadAttention's is_causal without a mask applies PyTorch's causal bool mask") {
  // PyTorch needs the mask with the hint; here the flag alone builds it (in the fused kernel
  // without padding or weights, as one mask with them).
  run_attention_case({.name = "mha_batch_first_causal_no_weights", .options = {.batch_first = true}, .need_weights = false},
                     /*causal_flag_for_mask=*/true);
}

TEST_CASE("MultiheadAttention's parameters: PyTorch's names, shapes and initialisation") {
  nn::MultiheadAttention attention(32, 4);
  std::vector<std::string> names;
  for (const auto& [name, tensor] : attention.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  CHECK(attention.in_proj_weight.sizes() == ts::Shape{96, 32});
  // xavier_uniform_ on [3E, E]: U(-b, b), b = sqrt(6 / (E + 3E)); biases zero.
  const double bound = std::sqrt(6.0 / (32 + 96));
  const std::vector<double> w = attention.in_proj_weight.to_vector<double>();
  const double largest = std::abs(*std::max_element(w.begin(), w.end(), [](double a, double b) { return std::abs(a) < std::abs(b); }));
  CHECK(largest <= bound);
  CHECK(largest > 0.9 * bound);
  CHECK(attention.in_proj_bias.abs().sum().item<double>() == 0.0);
  CHECK(attention.out_proj.bias.abs().sum().item<double>() == 0.0);
  // out_proj.weight keeps Linear's kaiming_uniform(a = sqrt(5)): U(-1/sqrt(E), 1/sqrt(E)).
  CHECK(attention.out_proj.weight.abs().amax({0, 1}).item<double>() <= 1.0 / std::sqrt(32.0));

  // add_bias_kv: bias_k and bias_v [1, 1, E] after in_proj_bias, xavier_normal_ (std sqrt(2 / (E + E))).
  nn::MultiheadAttention extra(256, 4, {.add_bias_kv = true});
  names.clear();
  for (const auto& [name, tensor] : extra.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "bias_k", "bias_v", "out_proj.weight",
                                          "out_proj.bias"});
  CHECK(extra.bias_k.sizes() == ts::Shape{1, 1, 256});
  const double std_k = extra.bias_k.std().item<double>(), std_v = extra.bias_v.std().item<double>();
  // The std of 256 draws spreads by 1 / sqrt(2 * 256) = 4.4% of itself: 20% is 4.5 of those.
  CHECK(std::abs(std_k - 1.0 / 16.0) < 0.2 / 16.0);
  CHECK(std::abs(std_v - 1.0 / 16.0) < 0.2 / 16.0);
  CHECK_FALSE(ts::equal(extra.bias_k, extra.bias_v));

  nn::MultiheadAttention separate(16, 2, {.bias = false, .kdim = 8, .vdim = 4});
  names.clear();
  for (const auto& [name, tensor] : separate.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "out_proj.weight"});

  ts::Tensor x = ts::randn({5, 2, 32});
  auto [y, weights] = attention(x, x, x, {.need_weights = false});
  CHECK(y.sizes() == ts::Shape{5, 2, 32});
  CHECK_FALSE(weights.defined());
}

TEST_CASE("MultiheadAttention's errors name the shapes") {
  CHECK(contains(error_of([] { nn::MultiheadAttention(30, 4); }), "divisible"));
  nn::MultiheadAttention attention(16, 4, {.batch_first = true});
  ts::Tensor x = ts::randn({2, 5, 16});
  CHECK(contains(error_of([&] { attention(x, ts::randn({2, 5, 12}), x); }), "[2, 5, 12]"));
  CHECK(contains(error_of([&] { attention(x, x, x, {.key_padding_mask = ts::zeros({2, 4}, {.dtype = DType::boolean})}); }),
                 "key_padding_mask should be [2, 5]"));
  CHECK(contains(error_of([&] { attention(x, x, x, {.attn_mask = ts::zeros({5, 4})}); }), "got [5, 4]"));
  CHECK(contains(error_of([&] { attention(x, x, x, {.attn_mask = ts::zeros({5, 5}, {.dtype = DType::i64})}); }),
                 "boolean"));
  CHECK(contains(error_of([&] { attention(ts::randn({16}), ts::randn({16}), ts::randn({16})); }), "3-D"));
  CHECK(contains(error_of([] { nn::TransformerEncoderLayer(16, 4, {.activation = "tanh"}); }),
                 "activation should be relu/gelu, not tanh"));
}

TEST_CASE("TransformerEncoderLayer, TransformerEncoder and TransformerDecoderLayer match PyTorch 1.13") {
  struct LayerCase {
    std::string name;
    nn::TransformerLayerOptions options;
  };
  auto options = [](bool norm_first, const char* activation, bool batch_first) {
    return nn::TransformerLayerOptions{.dim_feedforward = 32, .dropout = 0.0, .activation = activation,
                                       .batch_first = batch_first, .norm_first = norm_first};
  };
  double worst = 0;
  for (const LayerCase& spec : std::vector<LayerCase>{{"encoder_post_norm_relu", options(false, "relu", false)},
                                                      {"encoder_pre_norm_gelu", options(true, "gelu", true)},
                                                      {"encoder_post_norm_gelu", options(false, "gelu", true)},
                                                      {"encoder_pre_norm_relu", options(true, "relu", false)}}) {
    const Case c{spec.name};
    CAPTURE(c.name);
    nn::TransformerEncoderLayer layer(16, 4, spec.options);
    load_reference_state(layer, c, DType::f64);
    Tensor src = c.input("src");
    Tensor y = layer(src, {.src_mask = c.mask("src_mask"), .src_key_padding_mask = c.mask("src_key_padding_mask")});
    worst = std::max(worst, compare(layer, c, y, Tensor(), {{"src", src}}, f64_tolerance));
  }
  {
    const Case c{"encoder_stack"};
    nn::TransformerEncoderLayer layer(16, 4, options(false, "gelu", true));
    nn::TransformerEncoder encoder(layer, 2, std::make_shared<nn::LayerNorm>(16));
    load_reference_state(encoder, c, DType::f64);
    Tensor src = c.input("src");
    Tensor y = encoder(src, {.src_key_padding_mask = c.mask("src_key_padding_mask")});
    worst = std::max(worst, compare(encoder, c, y, Tensor(), {{"src", src}}, f64_tolerance));
  }
  for (const LayerCase& spec : std::vector<LayerCase>{{"decoder_post_norm_relu", options(false, "relu", false)},
                                                      {"decoder_pre_norm_gelu", options(true, "gelu", true)}}) {
    const Case c{spec.name};
    CAPTURE(c.name);
    nn::TransformerDecoderLayer layer(16, 4, spec.options);
    load_reference_state(layer, c, DType::f64);
    Tensor tgt = c.input("tgt"), memory = c.input("memory");
    Tensor y = layer(tgt, memory,
                     {.tgt_mask = c.mask("tgt_mask"), .memory_mask = c.mask("memory_mask"),
                      .tgt_key_padding_mask = c.mask("tgt_key_padding_mask"),
                      .memory_key_padding_mask = c.mask("memory_key_padding_mask")});
    worst = std::max(worst, compare(layer, c, y, Tensor(), {{"tgt", tgt}, {"memory", memory}}, f64_tolerance));
  }
  MESSAGE("transformer layers, largest difference from PyTorch (float64): " << worst);
}

TEST_CASE("TransformerDecoder matches PyTorch 1.13: stacks with and without a final norm, every mask") {
  struct StackCase {
    std::string name;
    int64_t num_layers;
    bool norm;
    nn::TransformerLayerOptions options;
  };
  double worst = 0;
  for (const StackCase& spec : std::vector<StackCase>{
           {"decoder_stack_pre_norm", 2, true,
            {.dim_feedforward = 32, .dropout = 0.0, .activation = "gelu", .batch_first = true, .norm_first = true}},
           {"decoder_stack_post_norm", 3, false,
            {.dim_feedforward = 32, .dropout = 0.0, .activation = "relu", .batch_first = false, .norm_first = false}}}) {
    const Case c{spec.name};
    CAPTURE(c.name);
    nn::TransformerDecoderLayer layer(16, 4, spec.options);
    nn::TransformerDecoder decoder(layer, spec.num_layers, spec.norm ? std::make_shared<nn::LayerNorm>(16) : nullptr);
    load_reference_state(decoder, c, DType::f64);
    Tensor tgt = c.input("tgt"), memory = c.input("memory");
    Tensor y = decoder(tgt, memory,
                       {.tgt_mask = c.mask("tgt_mask"), .memory_mask = c.mask("memory_mask"),
                        .tgt_key_padding_mask = c.mask("tgt_key_padding_mask"),
                        .memory_key_padding_mask = c.mask("memory_key_padding_mask")});
    worst = std::max(worst, compare(decoder, c, y, Tensor(), {{"tgt", tgt}, {"memory", memory}}, f64_tolerance));
  }
  MESSAGE("TransformerDecoder, largest difference from PyTorch (float64): " << worst);
}

TEST_CASE("TransformerDecoder: copies of the layer under layers.N, then norm; tgt_is_causal reaches each layer") {
  nn::TransformerDecoderLayer layer(16, 4, {.dim_feedforward = 32, .dropout = 0.0, .batch_first = true});
  nn::TransformerDecoder decoder(layer, 2, std::make_shared<nn::LayerNorm>(16));
  CHECK(decoder.num_layers() == 2);
  ts::StateDict state = decoder.state_dict();
  CHECK(state.contains("layers.1.multihead_attn.in_proj_weight"));
  CHECK(state.contains("layers.0.norm3.bias"));
  CHECK(state.contains("norm.weight"));
  CHECK_FALSE(state.contains("layers.2.linear1.weight"));
  CHECK(ts::equal(state.at("layers.0.linear1.weight"), state.at("layers.1.linear1.weight")));
  CHECK(ts::equal(state.at("layers.1.self_attn.in_proj_weight"), layer.self_attn.in_proj_weight));

  ts::Generator gen(3);
  Tensor tgt = ts::randn({2, 6, 16}, gen), memory = ts::randn({2, 4, 16}, gen);
  Tensor causal = ts::ones({6, 6}, {.dtype = DType::boolean}).triu(1);
  Tensor flagged = decoder(tgt, memory, {.tgt_is_causal = true});
  Tensor masked = decoder(tgt, memory, {.tgt_mask = causal});
  CHECK(test_support::largest_error(flagged, masked) <= 1e-6);
  // Causal: changing the last target position leaves the earlier outputs as they were.
  Tensor changed = tgt.clone();
  changed.narrow(1, 5, 1).fill_(3.0);
  Tensor after = decoder(changed, memory, {.tgt_is_causal = true});
  CHECK(test_support::largest_error(after.narrow(1, 0, 5), flagged.narrow(1, 0, 5)) <= 1e-6);
  CHECK(test_support::largest_error(after.narrow(1, 5, 1), flagged.narrow(1, 5, 1)) > 1e-2);

  CHECK(contains(error_of([&] { nn::TransformerDecoder(layer, 0); }), "TransformerDecoder: num_layers must be positive, got 0"));
}

TEST_CASE("TransformerEncoder: layers are copies of the given layer under PyTorch's names") {
  nn::TransformerEncoderLayer layer(16, 4, {.dim_feedforward = 32});
  nn::TransformerEncoder encoder(layer, 3);
  CHECK(encoder.num_layers() == 3);
  ts::StateDict state = encoder.state_dict();
  CHECK(state.contains("layers.2.self_attn.in_proj_weight"));
  CHECK(state.contains("layers.0.linear1.weight"));
  CHECK_FALSE(state.contains("norm.weight"));
  CHECK(ts::equal(state.at("layers.0.linear2.weight"), state.at("layers.2.linear2.weight")));
  CHECK(ts::equal(state.at("layers.1.self_attn.in_proj_weight"), layer.self_attn.in_proj_weight));
  std::vector<std::string> children;
  for (const auto& [name, child] : layer.named_children()) children.push_back(name);
  CHECK(children == std::vector<std::string>{"self_attn", "linear1", "dropout", "linear2", "norm1", "norm2",
                                             "dropout1", "dropout2"});
}

namespace {

// Sequences of kTokens tokens from kVocab; the label says whether the first token appears
// again later: a question about pairs of positions, which attention answers.
constexpr int64_t kVocab = 8, kTokens = 8;

std::pair<Tensor, Tensor> repeat_batch(std::mt19937& rng, int64_t batch) {
  std::vector<int64_t> tokens(batch * kTokens), labels(batch);
  std::uniform_int_distribution<int64_t> token(0, kVocab - 1);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t* row = tokens.data() + b * kTokens;
    const bool repeats = b % 2 == 0;  // balanced classes
    row[0] = token(rng);
    for (int64_t t = 1; t < kTokens; ++t) {
      do row[t] = token(rng);
      while (row[t] == row[0]);
    }
    if (repeats) row[1 + rng() % (kTokens - 1)] = row[0];
    labels[b] = repeats ? 1 : 0;
  }
  return {ts::tensor<int64_t>(tokens, {batch, kTokens}), ts::tensor<int64_t>(labels, {batch})};
}

struct RepeatClassifier : nn::Module {
  nn::Embedding tokens{kVocab, 32}, positions{kTokens, 32};
  nn::TransformerEncoderLayer layer{32, 4, {.dim_feedforward = 64, .dropout = 0.0, .batch_first = true}};
  nn::TransformerEncoder encoder{layer, 2};
  nn::Linear head{32, 2};
  RepeatClassifier() {
    register_modules({{"tokens", tokens}, {"positions", positions}, {"encoder", encoder}, {"head", head}});
  }
  Tensor forward(Tensor ids) override {
    Tensor x = tokens(ids) + positions(ts::arange(ids.size(1), {.dtype = DType::i64}));
    return head(encoder(x).select(1, 0));  // the first position's output decides
  }
};

}  // namespace

TEST_CASE("a TransformerEncoder classifier learns whether the first token repeats") {
  ts::manual_seed(0);
  RepeatClassifier model;
  ts::optim::Adam optimizer(model.parameters(), {.lr = 3e-3});
  std::mt19937 rng(0);
  for (int step = 0; step < 300; ++step) {
    auto [ids, labels] = repeat_batch(rng, 64);
    optimizer.zero_grad();
    Tensor loss = ts::cross_entropy(model(ids), labels);
    loss.backward();
    optimizer.step();
  }
  model.eval();
  auto [ids, labels] = repeat_batch(rng, 1000);
  const double accuracy = (model(ids).argmax(1) == labels).to(DType::f64).mean().item<double>();
  MESSAGE("held-out accuracy after 300 steps: " << accuracy);
  CHECK(accuracy >= 0.95);
}

// Calls of several tensors go through Module::call, so hooks run for them as for one tensor
// (FSDP gathers, reshards and registers backward in them: tests/fsdp/test_fsdp_attention.cpp).
TEST_CASE("MultiheadAttention's call runs its hooks, which see (query, key, value) and (output, weights)") {
  ts::manual_seed(3);
  nn::MultiheadAttention attention(8, 2, {.batch_first = true});
  attention.to(DType::f64);
  Tensor query = ts::randn({2, 3, 8}).to(DType::f64), memory = ts::randn({2, 4, 8}).to(DType::f64);
  std::vector<ts::Shape> seen_inputs, seen_outputs;
  Tensor first_input, first_output;
  attention.register_forward_pre_hook([&](nn::Module&, Tensor& input) { first_input = input; });
  attention.register_forward_args_pre_hook([&](nn::Module&, std::span<Tensor> inputs) {
    for (Tensor& t : inputs) seen_inputs.push_back(t.sizes());
    inputs[0] = inputs[0] * 2.0;  // hooks may replace an argument, as PyTorch's pre-hooks return new args
  });
  attention.register_forward_outputs_hook([&](nn::Module&, std::span<Tensor> outputs) {
    for (Tensor& t : outputs) seen_outputs.push_back(t.sizes());
  });
  attention.register_forward_hook([&](nn::Module&, Tensor& output) { first_output = output; });
  auto [output, weights] = attention(query, memory, memory);
  CHECK(seen_inputs == std::vector<ts::Shape>{{2, 3, 8}, {2, 4, 8}, {2, 4, 8}});
  CHECK(seen_outputs == std::vector<ts::Shape>{{2, 3, 8}, {2, 3, 4}});
  CHECK(ts::equal(first_input, query));
  CHECK(ts::equal(first_output, output));
  auto [direct, direct_weights] = attention.forward(query * 2.0, memory, memory);
  CHECK(ts::equal(output, direct));
  CHECK(ts::equal(weights, direct_weights));
}

TEST_CASE("the transformer layers' calls with masks and memory run every submodule's hooks") {
  ts::manual_seed(4);
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .batch_first = true});
  nn::TransformerEncoder encoder(layer, 2);
  std::map<std::string, int> calls;
  for (auto& [name, module] : encoder.named_modules()) {
    module->register_forward_pre_hook([&calls, name = name](nn::Module&, Tensor&) { ++calls[name]; });
  }
  Tensor x = ts::randn({2, 5, 8});
  Tensor padding = ts::zeros({2, 5}, {.dtype = DType::boolean});
  encoder(x, {.src_key_padding_mask = padding});
  CHECK(calls[""] == 1);
  CHECK(calls["layers.0"] == 1);
  CHECK(calls["layers.1"] == 1);
  CHECK(calls["layers.1.self_attn"] == 1);
  CHECK(calls["layers.1.self_attn.out_proj"] == 1);

  nn::TransformerDecoderLayer block(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .batch_first = true});
  nn::TransformerDecoder decoder(block, 2);
  std::vector<ts::Shape> layer_inputs;
  int cross_attention_calls = 0;
  decoder.layers.at<nn::TransformerDecoderLayer>(1).register_forward_args_pre_hook(
      [&](nn::Module&, std::span<Tensor> inputs) {
        for (Tensor& t : inputs) layer_inputs.push_back(t.sizes());
      });
  decoder.layers.at<nn::TransformerDecoderLayer>(0).multihead_attn.register_forward_pre_hook(
      [&](nn::Module&, Tensor&) { ++cross_attention_calls; });
  decoder(ts::randn({2, 3, 8}), ts::randn({2, 5, 8}), {.tgt_is_causal = true});
  CHECK(layer_inputs == std::vector<ts::Shape>{{2, 3, 8}, {2, 5, 8}});  // (tgt, memory)
  CHECK(cross_attention_calls == 1);
}

TEST_CASE("activation checkpointing reaches an encoder layer called with a mask, and refuses a bare attention") {
  ts::manual_seed(5);
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .batch_first = true});
  nn::TransformerEncoder plain(layer, 2), checkpointed(layer, 2);
  plain.to(DType::f64);
  checkpointed.to(DType::f64);
  int layer_calls = 0;
  checkpointed.layers[0].register_forward_pre_hook([&](nn::Module&, Tensor&) { ++layer_calls; });
  CHECK(nn::apply_activation_checkpointing(
            checkpointed, [](nn::Module& m) { return m.type_name() == "TransformerEncoderLayer"; }) == 2);
  Tensor x = ts::randn({2, 5, 8}).to(DType::f64);
  Tensor padding = ts::tensor<double>({0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, {2, 5}).to(DType::boolean);  // row 1: 3 tokens
  plain(x, {.src_key_padding_mask = padding}).sum().backward();
  checkpointed(x, {.src_key_padding_mask = padding}).sum().backward();
  CHECK(layer_calls == 2);  // the forward and its recomputation in backward: the wrapper ran
  auto plain_parameters = plain.named_parameters(), checkpointed_parameters = checkpointed.named_parameters();
  REQUIRE(plain_parameters.size() == checkpointed_parameters.size());
  for (size_t i = 0; i < plain_parameters.size(); ++i) {
    CAPTURE(plain_parameters[i].first);
    // The same ops in the same order, recomputed: bit for bit.
    CHECK(ts::equal(plain_parameters[i].second.grad(), checkpointed_parameters[i].second.grad()));
  }

  nn::MultiheadAttention attention(8, 2, {.batch_first = true});
  nn::apply_activation_checkpointing(attention, [](nn::Module& m) { return m.type_name() == "MultiheadAttention"; });
  CHECK(contains(error_of([&] { attention(x.to(DType::f32), x.to(DType::f32), x.to(DType::f32)); }),
                 "MultiheadAttention '' has a call wrapper (activation checkpointing), which takes one tensor, but this "
                 "call passes 3"));
}
