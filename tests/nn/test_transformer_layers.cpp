// The transformer layers as modules: Embedding, LayerNorm, GELU, Softmax, Identity,
// ModuleList and ModuleDict. Names in parameters and state dicts are PyTorch's, load is
// strict, printing is PyTorch's, errors name what was wrong; the embedding and layer-norm
// gradients have the same bits at one and two threads. (Values against PyTorch:
// tests/golden/test_layers_golden.cpp; gradients: tests/autograd's table.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <tessera/tessera.h>

#include "test_support.h"

namespace ts = tessera;
namespace nn = tessera::nn;
using test_support::contains;
using test_support::error_of;
using ts::DType;
using ts::Shape;
using ts::Tensor;

namespace {

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : named) names.push_back(name);
  return names;
}

std::string printed(nn::Module& module) {
  std::ostringstream out;
  out << module;
  return out.str();
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && a.dtype() == b.dtype() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

// A small GPT-shaped model: PyTorch's nanoGPT layout of ModuleDict and ModuleList.
struct Block : nn::Module {
  nn::LayerNorm ln_1{8};
  nn::Linear c_fc{8, 32};
  nn::GELU gelu{"tanh"};
  nn::Linear c_proj{32, 8};
  Block() { register_modules({{"ln_1", ln_1}, {"c_fc", c_fc}, {"gelu", gelu}, {"c_proj", c_proj}}); }
  Tensor forward(Tensor x) override { return x + c_proj(gelu(c_fc(ln_1(x)))); }
};

struct TinyGPT : nn::Module {
  nn::ModuleDict transformer;
  nn::Linear lm_head{8, 11, {.bias = false}};
  explicit TinyGPT(int layers) {
    transformer.emplace<nn::Embedding>("wte", 11, 8);
    transformer.emplace<nn::Embedding>("wpe", 6, 8);
    auto& h = transformer.emplace<nn::ModuleList>("h");
    for (int i = 0; i < layers; ++i) h.emplace<Block>();
    transformer.emplace<nn::LayerNorm>("ln_f", 8);
    register_modules({{"transformer", transformer}, {"lm_head", lm_head}});
  }
  Tensor forward(Tensor ids) override {
    Tensor positions = ts::arange(ids.size(1), {.dtype = DType::i64});
    Tensor x = transformer["wte"](ids) + transformer["wpe"](positions);
    for (nn::Module& block : transformer.at<nn::ModuleList>("h")) x = block(x);
    return lm_head(transformer["ln_f"](x));
  }
};

}  // namespace

TEST_CASE("Embedding: N(0, 1) init keyed by name, the padding row zero, PyTorch's names and printing") {
  nn::Embedding table(1000, 16, {.padding_idx = 3});
  CHECK(names_of(table.named_parameters()) == std::vector<std::string>{"weight"});
  CHECK(table.weight.sizes() == Shape{1000, 16});
  CHECK(table.weight.requires_grad());
  std::vector<double> values = table.weight.to(DType::f64).to_vector<double>();
  double sum = 0, square = 0;
  for (double v : values) sum += v, square += v * v;
  const double mean = sum / values.size(), stddev = std::sqrt(square / values.size() - mean * mean);
  CHECK(std::abs(mean) < 0.02);  // 16000 draws: the mean's standard error is 0.008
  CHECK(std::abs(stddev - 1.0) < 0.02);
  for (int64_t j = 0; j < 16; ++j) CHECK(values[3 * 16 + j] == 0.0);
  CHECK(values[2 * 16] != 0.0);

  // Values are keyed by (seed, name, index): the same table again, another seed differs.
  nn::Embedding again(1000, 16, {.padding_idx = 3});
  CHECK(bitwise_equal(again.weight, table.weight));
  nn::Embedding reseeded(1000, 16, {.padding_idx = 3});
  reseeded.reset_parameters(5);
  CHECK_FALSE(bitwise_equal(reseeded.weight, table.weight));

  CHECK(printed(table) == "Embedding(1000, 16, padding_idx=3)");
  nn::Embedding options(10, 3, {.padding_idx = -1, .max_norm = 2.0, .norm_type = 1.0, .scale_grad_by_freq = true});
  CHECK(options.options().padding_idx == 9);  // negative counts from the end, as PyTorch
  CHECK(printed(options) == "Embedding(10, 3, padding_idx=9, max_norm=2, norm_type=1, scale_grad_by_freq=True)");
}

TEST_CASE("Embedding: lookup, the padding row's zero gradient, from_pretrained") {
  Tensor weights = ts::arange(12, {.dtype = DType::f32}).view({4, 3});
  auto table = nn::Embedding::from_pretrained(weights, /*freeze=*/false, {.padding_idx = 0});
  Tensor ids = ts::tensor<int64_t>({2, 0, 2, 3}, {2, 2});
  Tensor out = table(ids);
  CHECK(out.sizes() == Shape{2, 2, 3});
  CHECK(out.to_vector<float>() == std::vector<float>{6, 7, 8, 0, 1, 2, 6, 7, 8, 9, 10, 11});
  out.sum().backward();
  CHECK(table->weight.grad().to_vector<float>() == std::vector<float>{0, 0, 0, 0, 0, 0, 2, 2, 2, 1, 1, 1});
  CHECK(table->weight.storage() == weights.storage());  // PyTorch shares the given tensor too

  auto frozen = nn::Embedding::from_pretrained(weights);
  CHECK_FALSE(frozen->weight.requires_grad());
  CHECK(frozen->parameters().size() == 1);
}

TEST_CASE("Embedding: errors name what is wrong") {
  CHECK(contains(error_of([] { nn::Embedding(10, 3, {.sparse = true}); }), "sparse gradients"));
  CHECK(contains(error_of([] { nn::Embedding(10, 3, {.padding_idx = 10}); }), "padding_idx 10 must be within"));
  CHECK(contains(error_of([] { nn::Embedding(10, 3, {.padding_idx = -11}); }), "padding_idx -11"));
  nn::Embedding table(5, 2);
  const std::string message = error_of([&] { table(ts::tensor<int64_t>({1, 5, 0}, {1, 3})); });
  CHECK(contains(message, "index 5 at position 1 of indices [1, 3] is out of range for 5 embeddings"));
  CHECK(contains(error_of([&] { table(ts::tensor<int64_t>({-1})); }), "index -1 at position 0"));
  CHECK(contains(error_of([&] { table(ts::ones({2})); }), "indices must be int64, got float32"));
  CHECK_THROWS_AS(table(ts::tensor<int64_t>({7})), ts::IndexError);
}

TEST_CASE("LayerNorm: weight 1 and bias 0, bias=false, no affine, printing, shape errors") {
  nn::LayerNorm ln(768);
  CHECK(names_of(ln.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(ln.weight.sizes() == Shape{768});
  CHECK(ln.weight.to_vector<float>() == std::vector<float>(768, 1.0f));
  CHECK(ln.bias.to_vector<float>() == std::vector<float>(768, 0.0f));
  CHECK(printed(ln) == "LayerNorm((768,), eps=1e-05, elementwise_affine=True)");

  nn::LayerNorm weight_only({2, 3}, {.eps = 1e-6, .bias = false});
  CHECK(names_of(weight_only.named_parameters()) == std::vector<std::string>{"weight"});
  CHECK(weight_only.weight.sizes() == Shape{2, 3});
  CHECK(printed(weight_only) == "LayerNorm((2, 3), eps=1e-06, elementwise_affine=True)");
  nn::LayerNorm plain(4, {.elementwise_affine = false});
  CHECK(plain.parameters().empty());
  CHECK(printed(plain) == "LayerNorm((4,), eps=1e-05, elementwise_affine=False)");

  // The module computes what the functional form computes.
  ts::Generator gen(3);
  Tensor x = ts::randn({5, 2, 3}, gen);
  CHECK(bitwise_equal(weight_only(x), ts::layer_norm(x, {2, 3}, weight_only.weight, {}, 1e-6)));
  Tensor y = plain(ts::randn({3, 4}, gen) * 10.0 + 3.0);
  for (int64_t r = 0; r < 3; ++r) {
    Tensor row = y.select(0, r);
    CHECK(std::abs(row.mean().item<float>()) < 1e-6);
    CHECK(std::abs((row * row).mean().item<float>() - 1.0f) < 1e-4);
  }
  CHECK(contains(error_of([&] { ln(ts::ones({2, 767})); }),
                 "given normalized_shape=[768], expected input with shape [*, 768], but got input of size [2, 767]"));
  CHECK(contains(error_of([] { nn::LayerNorm(4, {.eps = -1}); }), "eps must be non-negative"));
}

TEST_CASE("GELU, Softmax, Identity: forms, printing, the functional results") {
  nn::GELU exact;
  nn::GELU tanh_form("tanh");
  CHECK(printed(exact) == "GELU(approximate='none')");
  CHECK(printed(tanh_form) == "GELU(approximate='tanh')");
  CHECK(tanh_form.approximate() == ts::GeluApproximate::tanh);
  CHECK(contains(error_of([] { nn::GELU("fast"); }), "approximate must be \"none\" or \"tanh\", got \"fast\""));
  Tensor x = ts::tensor<double>({-3.0, -1.0, 0.0, 0.5, 2.0});
  std::vector<double> y = exact(x).to_vector<double>();
  for (size_t i = 0; i < y.size(); ++i) {
    const double v = x.to_vector<double>()[i];
    CHECK(y[i] == doctest::Approx(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)))).epsilon(1e-15));
  }
  std::vector<double> t = tanh_form(x).to_vector<double>();
  CHECK(t[4] == doctest::Approx(0.5 * 2.0 * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (2.0 + 0.044715 * 8.0)))));

  nn::Softmax softmax(1);
  CHECK(printed(softmax) == "Softmax(dim=1)");
  Tensor logits = ts::tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(bitwise_equal(softmax(logits), ts::softmax(logits, 1)));

  nn::Identity identity;
  CHECK(printed(identity) == "Identity()");
  CHECK(identity(logits).is_same(logits));
}

TEST_CASE("ModuleList and ModuleDict: PyTorch's dotted names, typed access, iteration, errors") {
  TinyGPT gpt(2);
  const std::vector<std::string> expected = {
      "transformer.wte.weight",         "transformer.wpe.weight",         "transformer.h.0.ln_1.weight",
      "transformer.h.0.ln_1.bias",      "transformer.h.0.c_fc.weight",    "transformer.h.0.c_fc.bias",
      "transformer.h.0.c_proj.weight",  "transformer.h.0.c_proj.bias",    "transformer.h.1.ln_1.weight",
      "transformer.h.1.ln_1.bias",      "transformer.h.1.c_fc.weight",    "transformer.h.1.c_fc.bias",
      "transformer.h.1.c_proj.weight",  "transformer.h.1.c_proj.bias",    "transformer.ln_f.weight",
      "transformer.ln_f.bias",          "lm_head.weight"};
  CHECK(names_of(gpt.named_parameters()) == expected);
  CHECK(gpt.state_dict().keys() == expected);

  auto& h = gpt.transformer.at<nn::ModuleList>("h");
  CHECK(h.size() == 2);
  CHECK(h.path() == "transformer.h");
  Block& last = h.at<Block>(-1);
  CHECK(last.path() == "transformer.h.1");
  CHECK(&h[1] == &last);
  int count = 0;
  for (nn::Module& block : h) {
    CHECK(block.type_name() == "Block");
    ++count;
  }
  CHECK(count == 2);
  CHECK(gpt.transformer.keys() == std::vector<std::string>{"wte", "wpe", "h", "ln_f"});
  CHECK(gpt.transformer.contains("ln_f"));
  std::vector<std::string> keys;
  for (auto [key, module] : gpt.transformer) keys.push_back(key + ":" + module.type_name());
  CHECK(keys == std::vector<std::string>{"wte:Embedding", "wpe:Embedding", "h:ModuleList", "ln_f:LayerNorm"});

  CHECK(contains(error_of([&] { h.at<nn::Linear>(0); }), "ModuleList entry 'transformer.h.0' is a Block, not a Linear"));
  CHECK(contains(error_of([&] { gpt.transformer.at<nn::Linear>("wte"); }),
                 "ModuleDict entry 'transformer.wte' is a Embedding, not a Linear"));
  CHECK(contains(error_of([&] { h[2]; }), "index 2 is out of range for 2 modules"));
  CHECK_THROWS_AS(h[-3], ts::IndexError);
  CHECK(contains(error_of([&] { gpt.transformer["wqe"]; }), "no module under 'wqe' (keys: wte, wpe, h, ln_f)"));
  CHECK(contains(error_of([&] { gpt.transformer.emplace<nn::Identity>("wte"); }), "key 'wte' is already taken"));
  CHECK(contains(error_of([&] { gpt.transformer.emplace<nn::Identity>("a.b"); }), "invalid name 'a.b'"));
  CHECK(contains(error_of([&] { h(ts::ones({1})); }), "is a container and has no forward"));
  CHECK(contains(error_of([&] { h.append(nullptr); }), "null module"));

  // The model runs, trains through every layer and moves dtype as one tree.
  Tensor ids = ts::tensor<int64_t>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {2, 5});
  Tensor loss = ts::cross_entropy(gpt(ids).view({10, 11}), ts::tensor<int64_t>({2, 3, 4, 5, 6, 7, 8, 9, 10, 0}));
  loss.backward();
  for (auto& [name, parameter] : gpt.named_parameters()) {
    CAPTURE(name);
    CHECK(parameter.grad().defined());
  }
  gpt.to(DType::f64);
  CHECK(last.ln_1.weight.dtype() == DType::f64);
  gpt.eval();
  CHECK_FALSE(last.is_training());
}

TEST_CASE("ModuleList and ModuleDict: state dicts load strictly, printing nests as PyTorch's") {
  TinyGPT source(1), target(1);
  source.reset_parameters(11);
  target.load_state_dict(source.state_dict());
  CHECK(bitwise_equal(target.transformer.at<nn::ModuleList>("h").at<Block>(0).c_fc.weight,
                      source.transformer.at<nn::ModuleList>("h").at<Block>(0).c_fc.weight));

  TinyGPT deeper(2);
  const std::string message = error_of([&] { deeper.load_state_dict(source.state_dict()); });
  CHECK(contains(message, "missing keys"));
  CHECK(contains(message, "transformer.h.1.c_fc.weight"));
  ts::StateDict extra = deeper.state_dict();
  CHECK(contains(error_of([&] { source.load_state_dict(extra); }), "unexpected keys:\n    transformer.h.1.ln_1.weight"));
  source.load_state_dict(extra, /*strict=*/false);

  nn::ModuleList list{std::make_shared<nn::Linear>(2, 3), std::make_shared<nn::GELU>()};
  list.emplace<nn::Softmax>(-1);
  CHECK(printed(list) ==
        "ModuleList(\n"
        "  (0): Linear(in_features=2, out_features=3, bias=True)\n"
        "  (1): GELU(approximate='none')\n"
        "  (2): Softmax(dim=-1)\n"
        ")");
  CHECK(contains(printed(source), "  (transformer): ModuleDict(\n    (wte): Embedding(11, 8)\n"));
  CHECK(contains(printed(source), "    (h): ModuleList(\n      (0): Block(\n        (ln_1): LayerNorm((8,), eps=1e-05,"));
}

TEST_CASE("the embedding and layer-norm gradients have the same bits at one and two threads") {
  // Large enough for every parallel loop to split (more than kParallelGrain elements).
  ts::Generator gen(21);
  Tensor table = ts::randn({5000, 64}, gen).requires_grad_();
  Tensor ids = ts::randint(0, 300, {64, 64}, gen);  // 4096 lookups of 300 rows: many repeats
  Tensor x = ts::randn({512, 768}, gen).requires_grad_();
  Tensor weight = ts::rand({768}, gen).requires_grad_(), bias = ts::randn({768}, gen).requires_grad_();
  Tensor grad_x = ts::randn({512, 768}, gen);
  Tensor grad_rows = ts::randn({64, 64, 64}, gen);

  auto gradients = [&](int threads) {
    ts::set_num_threads(threads);
    for (Tensor* t : {&table, &x, &weight, &bias}) t->set_grad(Tensor());
    ts::embedding(ids, table).backward(grad_rows);
    ts::embedding(ids, table, {.padding_idx = 7, .scale_grad_by_freq = true}).backward(grad_rows);
    ts::layer_norm(x, {768}, weight, bias).backward(grad_x);
    return std::vector<Tensor>{table.grad(), x.grad(), weight.grad(), bias.grad()};
  };
  const int before = ts::get_num_threads();
  std::vector<Tensor> one = gradients(1), two = gradients(2);
  ts::set_num_threads(before);
  for (size_t i = 0; i < one.size(); ++i) {
    CAPTURE(i);
    CHECK(bitwise_equal(one[i], two[i]));
  }
}
