// models::GPT2 against Hugging Face's layout and PyTorch 1.13 (tests/models/make_gpt2_reference.py,
// tools/gpt2_torch.py): the module tree and names, GPT-2's initialisation, loading the files
// HF users have and saving what HF reads, forward and backward on the same weights and
// tokens, and generation (greedy as PyTorch's; cached as uncached; seeded sampling).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include <sstream>
#include <tessera/tessera.h>

#include "gpt2_reference.h"
#include "temp_dir.h"
#include "test_support.h"

namespace ts = tessera;
namespace models = tessera::models;
using gpt2_reference::reference;
using gpt2_reference::tag;
using test_support::contains;
using test_support::error_of;
using test_support::relative_difference;
using ts::DType;
using ts::Tensor;

namespace {

bool reporting() { return std::getenv("TESSERA_REPORT") != nullptr; }

std::vector<std::string> keys_of(const ts::StateDict& state) { return state.keys(); }

}  // namespace

TEST_CASE("GPT2: Hugging Face's module tree, names, shapes and order") {
  models::GPT2 model({.n_layer = 2, .n_head = 2, .n_embd = 8, .block_size = 16, .vocab_size = 40});
  std::vector<std::string> expected{"transformer.wte.weight", "transformer.wpe.weight"};
  for (const std::string block : {"transformer.h.0.", "transformer.h.1."}) {
    for (const char* name : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                             "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                             "mlp.c_proj.weight", "mlp.c_proj.bias"}) {
      expected.push_back(block + name);
    }
  }
  expected.push_back("transformer.ln_f.weight");
  expected.push_back("transformer.ln_f.bias");
  ts::StateDict state = model.state_dict();
  CHECK(keys_of(state) == expected);  // no lm_head.weight: tied to wte, as HF's save_pretrained writes
  CHECK(state.at("transformer.h.0.attn.c_attn.weight").sizes() == ts::Shape{8, 24});  // Conv1D [in, out]
  CHECK(state.at("transformer.h.1.mlp.c_fc.weight").sizes() == ts::Shape{8, 32});
  CHECK(state.at("transformer.h.1.mlp.c_proj.weight").sizes() == ts::Shape{32, 8});
  CHECK(state.at("transformer.wpe.weight").sizes() == ts::Shape{16, 8});
  CHECK(model.parameters().size() == expected.size());  // the tied weight once
  int64_t count = 0;
  for (const Tensor& p : model.parameters()) count += p.numel();
  CHECK(count == model.config().num_parameters());

  std::ostringstream printed;
  printed << model;
  CHECK(contains(printed.str(), "(lm_head): TiedLinear(in_features=8, out_features=40, bias=False, weight=transformer.wte.weight)"));
  CHECK(contains(printed.str(), "(c_attn): Conv1D(nf=24, nx=8)"));
  CHECK(contains(printed.str(), "(act): GELU(approximate='tanh')"));

  models::GPT2 no_bias({.n_layer = 1, .n_head = 2, .n_embd = 8, .block_size = 4, .vocab_size = 10, .bias = false});
  CHECK(!no_bias.state_dict().contains("transformer.h.0.attn.c_attn.bias"));
  CHECK(!no_bias.state_dict().contains("transformer.ln_f.bias"));
  int64_t no_bias_count = 0;
  for (const Tensor& p : no_bias.parameters()) no_bias_count += p.numel();
  CHECK(no_bias_count == no_bias.config().num_parameters());
}

TEST_CASE("GPT2: the presets are GPT-2's sizes (parameters as Hugging Face counts them)") {
  CHECK(models::GPTConfig::preset("gpt2").num_parameters() == 124'439'808);
  CHECK(models::GPTConfig::preset("gpt2-medium").num_parameters() == 354'823'168);
  CHECK(models::GPTConfig::preset("gpt2-large").num_parameters() == 774'030'080);
  CHECK(models::GPTConfig::preset("gpt2-xl").num_parameters() == 1'557'611'200);
  // The count is the built model's, for every preset (building one allocates nothing).
  for (const std::string& name : models::GPTConfig::preset_names()) {
    CAPTURE(name);
    models::GPT2 model(models::GPTConfig::preset(name));
    int64_t count = 0;
    for (const Tensor& p : model.parameters()) count += p.numel();
    CHECK(count == model.config().num_parameters());
    CHECK(model.config().checked_num_parameters() == count);
  }
  // Sizes whose count passes int64 are refused by check() (and the constructor) before
  // anything is built: before, n_layer = 2^63 - 1 built blocks for ever.
  const models::GPTConfig deep{.n_layer = std::numeric_limits<int64_t>::max()};
  CHECK_FALSE(deep.checked_num_parameters().has_value());
  CHECK(contains(error_of([&] { deep.check(); }), "GPTConfig: n_layer 9223372036854775807, n_embd 768, block_size 1024 "
                                                  "and vocab_size 50257 make more than 9223372036854775807 parameters"));
  CHECK(contains(error_of([&] { models::GPT2 model(deep); }), "make more than 9223372036854775807 parameters"));
  CHECK_FALSE(models::GPTConfig{.n_head = 1, .n_embd = int64_t{3} << 30}.checked_num_parameters().has_value());  // c^2
  CHECK_FALSE(models::GPTConfig{.vocab_size = int64_t{1} << 62}.checked_num_parameters().has_value());
  CHECK(models::GPTConfig{.n_layer = 1, .n_head = 1, .n_embd = 1, .block_size = 1, .vocab_size = 1}.num_parameters() ==
        1 + 1 + 12 + 13 + 2);  // wte, wpe, the block's 12 c^2 + 13 c, ln_f
  // Building one allocates nothing: parameters stay deferred until used, loaded or sharded.
  models::GPT2 xl(models::GPTConfig::preset("GPT2-XL"));
  CHECK(xl.transformer.h.size() == 48);
  CHECK(xl.transformer.h.at<models::GPT2Block>(47).attn.c_attn.weight.sizes() == ts::Shape{1600, 4800});
  CHECK(contains(error_of([] { models::GPTConfig::preset("gpt3"); }), "gpt2, gpt2-medium, gpt2-large and gpt2-xl"));
  CHECK(contains(error_of([] { models::GPT2({.n_head = 5}); }), "n_embd (768) must be a multiple of n_head (5)"));
  CHECK(contains(error_of([] { models::GPT2({.dropout = 1.0}); }), "dropout must be in [0, 1)"));
}

TEST_CASE("GPT2: GPT-2's initialisation (N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer))") {
  models::GPT2 model({.n_layer = 8, .n_head = 4, .n_embd = 128, .block_size = 64, .vocab_size = 512});
  model.reset_parameters(3);
  auto std_of = [](const Tensor& t) {
    Tensor x = t.detach().to(DType::f64);
    Tensor centred = x - x.mean();
    return std::sqrt(centred.pow(2.0).mean().item<double>());
  };
  auto& block = model.transformer.h.at<models::GPT2Block>(5);
  const double residual = 0.02 / std::sqrt(16.0);
  CHECK(std_of(model.transformer.wte.weight) == doctest::Approx(0.02).epsilon(0.02));
  CHECK(std_of(model.transformer.wpe.weight) == doctest::Approx(0.02).epsilon(0.03));
  CHECK(std_of(block.attn.c_attn.weight) == doctest::Approx(0.02).epsilon(0.02));
  CHECK(std_of(block.mlp.c_fc.weight) == doctest::Approx(0.02).epsilon(0.02));
  CHECK(std_of(block.attn.c_proj.weight) == doctest::Approx(residual).epsilon(0.03));
  CHECK(std_of(block.mlp.c_proj.weight) == doctest::Approx(residual).epsilon(0.02));
  CHECK(block.attn.c_attn.bias.abs().sum().item<double>() == 0);
  CHECK(block.ln_1.weight.sum().item<double>() == 128);
  CHECK(model.transformer.ln_f.bias.abs().sum().item<double>() == 0);
}

TEST_CASE("GPT2: loads Hugging Face's files: the hub's layout and GPT2LMHeadModel's") {
  const auto& ref = reference();
  auto from_hub = gpt2_reference::reference_model(DType::f64);  // no prefix, mask buffers, no lm_head
  models::GPT2 from_lm_head(ref.config);                       // prefix, lm_head.weight = wte (float32)
  from_lm_head.load_hf_state_dict(ts::io::load(gpt2_reference::source_path("gpt2_tiny_lm_head.safetensors")));
  ts::StateDict a = from_hub->state_dict(), b = from_lm_head.state_dict();
  REQUIRE(a.keys() == b.keys());
  for (const auto& [name, tensor] : a) CHECK(relative_difference(b.at(name), tensor) < 1e-7);  // float32 rounding
  // The tied head reads wte: the loaded table is the head's weight.
  CHECK(from_hub->lm_head.weight().is_same(from_hub->transformer.wte.weight));

  SUBCASE("a wrong shape, an unknown or a missing key is the strict error naming them") {
    ts::StateDict bad = gpt2_reference::hub_weights();
    bad.insert("h.1.mlp.c_fc.weight", ts::zeros({4, 4}));
    bad.insert("h.0.attn.rotary.weight", ts::zeros({2}));
    bad.erase("ln_f.bias");
    models::GPT2 model(ref.config);
    std::string message = error_of([&] { model.load_hf_state_dict(bad); });
    CHECK(contains(message, "transformer.h.1.mlp.c_fc.weight: checkpoint [4, 4], model [32, 128]"));
    CHECK(contains(message, "unexpected keys:\n    transformer.h.0.attn.rotary.weight"));
    CHECK(contains(message, "missing keys:\n    transformer.ln_f.bias"));
  }
  SUBCASE("an lm_head that differs from wte cannot load into the tied head") {
    ts::StateDict untied = ts::io::load(gpt2_reference::source_path("gpt2_tiny_lm_head.safetensors"));
    untied.insert("lm_head.weight", untied.at("lm_head.weight") * 2.0);
    models::GPT2 model(ref.config);
    CHECK(contains(error_of([&] { model.load_hf_state_dict(untied); }), "lm_head.weight [96, 32] differs from transformer.wte.weight"));
  }
  SUBCASE("a NaN in the tied pair is named as not finite, not as an untied head") {
    ts::StateDict poisoned = ts::io::load(gpt2_reference::source_path("gpt2_tiny_lm_head.safetensors"));
    ts::Tensor head = poisoned.at("lm_head.weight").clone();
    head.view({-1}).select(0, 40).fill_(std::nan(""));
    poisoned.insert("lm_head.weight", head);
    models::GPT2 model(ref.config);
    const std::string message = error_of([&] { model.load_hf_state_dict(poisoned); });
    CHECK(contains(message, "gpt2_state_dict_from_hf: lm_head.weight [96, 32] is not finite: element 40 (flat index) is "
                            "nan, so it cannot be checked against the tied transformer.wte.weight"));
    CHECK_FALSE(contains(message, "differs"));
  }
}

TEST_CASE("GPT2: saves what Hugging Face's from_pretrained reads, and loads it back") {
  auto model = gpt2_reference::reference_model(DType::f32);
  ts::testing::TempDir dir;
  const std::string path = dir.file("model.safetensors");
  models::save_gpt2_safetensors(model->state_dict(), path);
  CHECK(ts::io::load_metadata(path) == ts::io::Metadata{{"format", "pt"}});
  ts::StateDict saved = ts::io::load(path);
  // GPT2LMHeadModel's names less the tied lm_head.weight (HF's _tied_weights_keys).
  std::vector<std::string> expected = ts::io::load(gpt2_reference::source_path("gpt2_tiny_lm_head.safetensors")).keys();
  expected.erase(std::find(expected.begin(), expected.end(), "lm_head.weight"));
  CHECK(saved.keys() == expected);
  models::GPT2 back(reference().config);
  back.load_hf_state_dict(saved);
  for (const auto& [name, tensor] : back.state_dict()) CHECK(relative_difference(tensor, saved.at(name)) == 0);

  const std::string config = models::hf_config_json(reference().config);
  ts::io::json::Value json = ts::io::json::parse(config);
  CHECK(json.at("model_type").as_string() == "gpt2");
  CHECK(json.at("n_positions").as_int() == 24);
  CHECK(json.at("activation_function").as_string() == "gelu_new");
  CHECK(contains(error_of([] { models::hf_config_json({.bias = false}); }), "bias = false"));
  ts::StateDict foreign;
  foreign.insert("fc.weight", ts::zeros({2}));
  CHECK(contains(error_of([&] { models::save_gpt2_safetensors(foreign, dir.file("x.safetensors")); }), "'fc.weight' is not a GPT2 parameter name"));
}

TEST_CASE("GPT2: forward and backward match PyTorch's GPT-2 on the same weights and tokens") {
  const auto& ref = reference();
  for (DType dtype : {DType::f32, DType::f64}) {
    CAPTURE(tag(dtype));
    auto model = gpt2_reference::reference_model(dtype);
    Tensor logits = model(ref.inputs(0));
    Tensor loss = ts::cross_entropy(logits.flatten(0, 1), ref.targets(0).flatten());
    loss.backward();
    // float64: summation order only; float32: the same plus float32 rounding of every
    // activation. Measured (TESSERA_REPORT=1): float32 logits 1.4e-7, loss 1.0e-7, gradient
    // norms 1.4e-7; float64 2.4e-16, 3.9e-16, 4.1e-16.
    const double tolerance = dtype == DType::f64 ? 1e-12 : 2e-6;
    const double logits_error = relative_difference(logits, ref.at(tag(dtype) + "/logits"));
    const double loss_error = gpt2_reference::relative_error(loss.item<double>(), ref.at(tag(dtype) + "/loss").to_vector<double>()[0]);
    CHECK(logits_error < tolerance);
    CHECK(loss_error < tolerance);
    double worst_grad = 0;
    for (auto& [name, p] : model->named_parameters()) {
      CAPTURE(name);
      REQUIRE(p.grad().defined());
      const double norm = p.grad().to(DType::f64).pow(2.0).sum().sqrt().item<double>();
      const double error = gpt2_reference::relative_error(norm, ref.at(tag(dtype) + "/grad_norm." + name).to_vector<double>()[0]);
      worst_grad = std::max(worst_grad, error);
      CHECK(error < tolerance * 10);  // a norm of a sum of many rounded terms
    }
    if (reporting()) {
      MESSAGE(tag(dtype), ": logits ", logits_error, ", loss ", loss_error, ", gradient norms ", worst_grad);
    }
  }
}

TEST_CASE("GPT2: forward(ids, targets) is the cross entropy of the logits, bit for bit, gradients too") {
  const auto& ref = reference();
  auto with_targets = gpt2_reference::reference_model(DType::f32);
  auto with_logits = gpt2_reference::reference_model(DType::f32);
  Tensor loss = with_targets->forward(ref.inputs(0), ref.targets(0));
  Tensor expected = ts::cross_entropy(with_logits(ref.inputs(0)).flatten(0, 1), ref.targets(0).flatten());
  CHECK(loss.item<float>() == expected.item<float>());
  loss.backward();
  expected.backward();
  auto a = with_targets->named_parameters(), b = with_logits->named_parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK_MESSAGE(ts::equal(a[i].second.grad(), b[i].second.grad()), a[i].first);
  Tensor summed = with_targets->forward(ref.inputs(0), ref.targets(0), {.reduction = ts::Reduction::sum});
  CHECK(summed.item<float>() == ts::cross_entropy(with_logits(ref.inputs(0)).flatten(0, 1), ref.targets(0).flatten(),
                                                  {.reduction = ts::Reduction::sum}).item<float>());
  CHECK(contains(error_of([&] { with_targets->forward(ref.inputs(0), ref.targets(0).flatten()); }),
                 "GPT2: targets of shape [" + std::to_string(ref.targets(0).numel()) + "] for ids of shape"));
}

TEST_CASE("GPT2: greedy generation picks PyTorch's tokens, past block_size too") {
  const auto& ref = reference();
  for (DType dtype : {DType::f32, DType::f64}) {
    CAPTURE(tag(dtype));
    auto model = gpt2_reference::reference_model(dtype);
    Tensor prompt = ref.at("tokens").select(0, 0).narrow(1, 0, ref.prompt_length);
    Tensor expected = ref.at(tag(dtype) + "/greedy");
    Tensor cached = model->generate(prompt, ref.new_tokens, {.temperature = 0});
    Tensor uncached = model->generate(prompt, ref.new_tokens, {.temperature = 0, .use_cache = false});
    REQUIRE(cached.sizes() == ts::Shape{ref.training.batch, ref.prompt_length + ref.new_tokens});
    CHECK(cached.to_vector<int64_t>() == expected.to_vector<int64_t>());
    CHECK(uncached.to_vector<int64_t>() == expected.to_vector<int64_t>());
    CHECK(model->is_training());  // generate restores the mode
  }
}

TEST_CASE("GPT2: cached and uncached generation agree token for token; sampling is seeded") {
  // A model of its own with an odd block size, so the window slides mid-generation.
  models::GPT2 model({.n_layer = 3, .n_head = 2, .n_embd = 16, .block_size = 13, .vocab_size = 50});
  model.reset_parameters(11);
  ts::Generator gen(5);
  Tensor prompt = ts::randint(0, 50, {3, 4}, gen);
  for (double temperature : {0.0, 0.7, 1.3}) {
    for (std::optional<int64_t> top_k : {std::optional<int64_t>{}, std::optional<int64_t>{5}}) {
      CAPTURE(temperature);
      models::GenerateOptions options{.temperature = temperature, .top_k = top_k, .seed = 9};
      Tensor cached = model.generate(prompt, 20, options);
      options.use_cache = false;
      Tensor uncached = model.generate(prompt, 20, options);
      CHECK(cached.to_vector<int64_t>() == uncached.to_vector<int64_t>());
      CHECK(cached.narrow(1, 0, 4).to_vector<int64_t>() == prompt.to_vector<int64_t>());
    }
  }
  Tensor a = model.generate(prompt, 10, {.seed = 1}), b = model.generate(prompt, 10, {.seed = 1});
  Tensor c = model.generate(prompt, 10, {.seed = 2});
  CHECK(a.to_vector<int64_t>() == b.to_vector<int64_t>());
  CHECK(a.to_vector<int64_t>() != c.to_vector<int64_t>());
  CHECK(model.generate(prompt, 6, {.top_k = 1, .seed = 4}).to_vector<int64_t>() ==
        model.generate(prompt, 6, {.temperature = 0}).to_vector<int64_t>());
  // A tiny temperature is greedy (float32 logits / 1e-300 would be +-inf and NaN in multinomial),
  // with and without top-k; as a temperature grows, samples leave the greedy path.
  const std::vector<int64_t> greedy = model.generate(prompt, 6, {.temperature = 0}).to_vector<int64_t>();
  for (double tiny : {1e-300, 5e-324}) {
    CAPTURE(tiny);
    CHECK(model.generate(prompt, 6, {.temperature = tiny, .seed = 4}).to_vector<int64_t>() == greedy);
    CHECK(model.generate(prompt, 6, {.temperature = tiny, .top_k = 5, .seed = 4}).to_vector<int64_t>() == greedy);
  }
  CHECK(model.generate(prompt, 6, {.temperature = 5.0, .seed = 4}).to_vector<int64_t>() != greedy);
  // A 1-D prompt gives a 1-D sequence; no new tokens gives the prompt.
  Tensor single = model.generate(prompt.select(0, 1), 3, {.temperature = 0});
  CHECK(single.sizes() == ts::Shape{7});
  CHECK(model.generate(prompt, 0).to_vector<int64_t>() == prompt.to_vector<int64_t>());
  CHECK(contains(error_of([&] { model.generate(prompt.to(DType::f32), 2); }), "expected int64 prompt ids"));
  CHECK(contains(error_of([&] { model.generate(prompt, 2, {.top_k = 0}); }), "top_k must be positive"));
}

TEST_CASE("GPT2: a cache filled in pieces gives the logits of the whole sequence") {
  models::GPT2 model({.n_layer = 2, .n_head = 4, .n_embd = 32, .block_size = 20, .vocab_size = 30});
  model.to(DType::f64);
  model.reset_parameters(2);
  model.eval();
  ts::NoGradGuard no_grad;
  ts::Generator gen(8);
  Tensor ids = ts::randint(0, 30, {2, 11}, gen);
  Tensor full = model(ids);  // [2, 11, 30]
  models::KVCache cache(model.config(), 2, 20, DType::f64, ts::Device::cpu());
  model.attach_cache(&cache);
  std::vector<std::pair<int64_t, int64_t>> pieces{{0, 4}, {4, 1}, {5, 6}};  // prompt, one token, a chunk
  for (auto [start, length] : pieces) {
    Tensor last = model(ids.narrow(1, start, length));
    CHECK(last.sizes() == ts::Shape{2, 1, 30});
    CHECK(relative_difference(last.select(1, 0), full.select(1, start + length - 1)) < 1e-13);
  }
  CHECK(cache.length == 11);
  CHECK(contains(error_of([&] { model(ts::zeros({2, 10}, {.dtype = DType::i64})); }), "21 positions exceed block_size 20"));
  model.attach_cache(nullptr);
  CHECK(model(ids).sizes() == ts::Shape{2, 11, 30});
  CHECK(contains(error_of([&] { model(ids.to(DType::f32)); }), "expected int64 token ids [B, T], got float32 [2, 11]"));
}

TEST_CASE("GPT2: 10 AdamW steps (nanoGPT's groups, schedule and clipping) match PyTorch's") {
  const auto& ref = reference();
  const auto& t = ref.training;
  for (DType dtype : {DType::f32, DType::f64}) {
    CAPTURE(tag(dtype));
    auto model = gpt2_reference::reference_model(dtype);
    gpt2_reference::NanoGptOptimizer opt(model->named_parameters(), t);
    const std::vector<double> losses = ref.at(tag(dtype) + "/loss").to_vector<double>();
    const std::vector<double> lrs = ref.at(tag(dtype) + "/lr").to_vector<double>();
    const std::vector<double> norms = ref.at(tag(dtype) + "/total_norm").to_vector<double>();
    double worst_loss = 0, worst_norm = 0;
    for (int64_t step = 0; step < t.steps; ++step) {
      CAPTURE(step);
      opt.adamw->zero_grad();
      Tensor loss = gpt2_reference::rows_loss(*model, step, 0, t.batch);
      loss.backward();
      const double norm = ts::nn::clip_grad_norm(model->parameters(), t.grad_clip);
      CHECK(opt.adamw->lr(0) == lrs[step]);  // LambdaLR and torch's, bit for bit
      opt.adamw->step();
      opt.schedule->step();
      const double loss_error = gpt2_reference::relative_error(loss.item<double>(), losses[step]);
      const double norm_error = gpt2_reference::relative_error(norm, norms[step]);
      CHECK(loss_error <= gpt2_reference::loss_tolerance(dtype));
      CHECK(norm_error <= gpt2_reference::loss_tolerance(dtype));
      worst_loss = std::max(worst_loss, loss_error);
      worst_norm = std::max(worst_norm, norm_error);
    }
    // Every parameter after the 10 steps, but for the key third of each c_attn.bias: its
    // gradient is 0 in exact arithmetic (a bias shared by all keys shifts a query's scores
    // alike, and softmax ignores that), so what it gets is rounding noise, which AdamW's
    // normalised step turns into moves of up to lr. No two implementations agree there
    // (PyTorch's float32 and float64 runs differ by 4e-6 on values of 1e-14).
    double worst_parameter = 0;
    const int64_t c = ref.config.n_embd;
    for (auto& [name, p] : model->named_parameters()) {
      CAPTURE(name);
      const Tensor& expected = ref.at(tag(dtype) + "/final." + name);
      std::vector<std::pair<Tensor, Tensor>> parts{{p, expected}};
      if (name.ends_with("attn.c_attn.bias")) parts = {{p.narrow(0, 0, c), expected.narrow(0, 0, c)}, {p.narrow(0, 2 * c, c), expected.narrow(0, 2 * c, c)}};
      for (const auto& [actual, wanted] : parts) {
        const double error = relative_difference(actual, wanted);
        CHECK(error <= gpt2_reference::loss_tolerance(dtype));
        worst_parameter = std::max(worst_parameter, error);
      }
    }
    CHECK(losses.back() < losses.front() - 0.1);  // it learns the progressions
    if (reporting()) {
      MESSAGE(tag(dtype), ": worst relative error per step: loss ", worst_loss, ", gradient norm ", worst_norm,
              "; parameters after 10 steps ", worst_parameter);
    }
  }
}
