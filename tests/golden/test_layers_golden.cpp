// Golden checks of the transformer layers against PyTorch: make_layers_golden.py ran
// F.layer_norm, F.gelu, torch.erf and F.embedding in PyTorch 1.13 (float32 and float64,
// one thread) and stored inputs, outputs, a fixed upstream gradient and the gradients in
// layers.safetensors. Tessera runs the same ops on the same inputs, backpropagates the
// same upstream gradient, and every element must satisfy |tessera - torch| <= atol +
// rtol * |torch| (golden_compare.h). PyTorch is not needed to run this.
//
// Set TESSERA_GOLDEN_REPORT=1 to print the largest errors seen per op and dtype.
#include <doctest/doctest.h>

#include <set>
#include <tessera/tessera.h>

#include "golden_compare.h"

namespace ts = tessera;
namespace io = tessera::io;
namespace json = tessera::io::json;
using golden_check::Tolerance;
using ts::DType;
using ts::Tensor;

namespace {

using Golden = golden_check::GoldenFile;

const Golden& golden_file() { return golden_check::golden_file("layers.safetensors"); }

Tolerance tolerance_for(const std::string& op, DType dtype) {
  // Measured (TESSERA_GOLDEN_REPORT=1, torch 1.13 on x86-64), largest |a - b|:
  //   layer_norm and embedding: 0 in both dtypes (the same operations in the same order:
  //   see tensor/cpu/layer_norm.cpp, cpu/embedding.cpp; the exactness has its own test
  //   below, so these bounds only report how far a future change drifts);
  //   embedding with max_norm f32 2.4e-7; gelu f32 8.7e-7 (see below), f64 6.7e-16;
  //   erf f32 2.4e-7, f64 4.4e-16.
  if (op == "layer_norm" || op == "embedding") {
    // max_norm's row norm is summed in double here and in float by PyTorch: its scale
    // (and the renormalised rows) may differ in the last bit of float32.
    return dtype == DType::f64 ? Tolerance{1e-14, 1e-14} : Tolerance{1e-7, 1e-6};
  }
  // gelu, erf: in float32 Tessera's own vectorisable erf/exp (cpu/vector_math.h, within
  // 2.5 ulp) and PyTorch's vectorised polynomials (its erf is Abramowitz-Stegun 7.1.26,
  // 1.5e-7 absolute) differ by a few ulps. The largest gap is PyTorch's own tail error: at
  // x = -5.14 PyTorch's float32 tanh rounds to -1 and its GELU-tanh derivative becomes 0,
  // where the exact value (and Tessera's float32, which forms 1 - tanh^2 without
  // cancellation) is -8.7e-7. Hence the absolute 2e-6 in float32.
  return dtype == DType::f64 ? Tolerance{1e-14, 1e-14} : Tolerance{2e-6, 1e-6};
}

// The roles make_layers_golden.py stores for a case (see its run_case).
std::set<std::string> roles_for(const json::Value& c) {
  const std::string& op = c.at("op").as_string();
  std::set<std::string> roles = {"input", "output", "grad_output", "grad_input"};
  if (op == "layer_norm") {
    if (c.at("weight").as_bool()) roles.insert({"weight", "grad_weight"});
    if (c.at("bias").as_bool()) roles.insert({"bias", "grad_bias"});
  }
  if (op == "embedding") {
    roles = {"weight", "indices", "output", "grad_output", "grad_weight"};
    if (!c.at("max_norm").is_null()) roles.insert("weight_after");
  }
  return roles;
}

ts::Shape shape_of(const json::Value& values) {
  ts::Shape shape;
  for (const json::Value& v : values.as_array()) shape.push_back(v.as_int());
  return shape;
}

void run_case(const json::Value& c) {
  const Golden& g = golden_file();
  const std::string& name = c.at("name").as_string();
  const std::string& op = c.at("op").as_string();
  const DType dtype = *io::dtype_from_safetensors(c.at("dtype").as_string());
  auto stored = [&](const std::string& role) { return g.tensors.at(name + "/" + role); };
  auto leaf = [&](const std::string& role) { return stored(role).clone().requires_grad_(); };
  const Tolerance tolerance = tolerance_for(op, dtype);
  const std::string stats_key = op + (dtype == DType::f32 ? " f32" : " f64");
  auto check = [&](const std::string& what, const Tensor& actual) {
    golden_check::compare(name + " " + what, stats_key, actual, stored(what), tolerance);
  };

  if (op == "layer_norm") {
    Tensor input = leaf("input");
    Tensor weight = c.at("weight").as_bool() ? leaf("weight") : Tensor();
    Tensor bias = c.at("bias").as_bool() ? leaf("bias") : Tensor();
    Tensor output = ts::layer_norm(input, shape_of(c.at("normalized_shape")), weight, bias, c.at("eps").as_double());
    output.backward(stored("grad_output"));
    check("output", output);
    check("grad_input", input.grad());
    if (weight.defined()) check("grad_weight", weight.grad());
    if (bias.defined()) check("grad_bias", bias.grad());
  } else if (op == "gelu" || op == "erf") {
    Tensor input = leaf("input");
    Tensor output = op == "erf" ? input.erf() : ts::gelu(input, c.at("approximate").as_string());
    output.backward(stored("grad_output"));
    check("output", output);
    check("grad_input", input.grad());
  } else if (op == "embedding") {
    Tensor weight = leaf("weight");
    ts::EmbeddingOptions options{.norm_type = c.at("norm_type").as_double(),
                                 .scale_grad_by_freq = c.at("scale_grad_by_freq").as_bool()};
    if (!c.at("padding_idx").is_null()) options.padding_idx = c.at("padding_idx").as_int();
    if (!c.at("max_norm").is_null()) options.max_norm = c.at("max_norm").as_double();
    Tensor output = ts::embedding(stored("indices"), weight, options);
    output.backward(stored("grad_output"));
    check("output", output);
    check("grad_weight", weight.grad());
    if (options.max_norm) check("weight_after", weight.detach());
  } else {
    FAIL("unknown op " << op << " in case " << name);
  }
}

}  // namespace

TEST_CASE("layers golden file: the cases, keys and dtypes make_layers_golden.py writes") {
  const Golden& g = golden_file();
  CHECK(g.metadata.at("generator") == "tests/golden/make_layers_golden.py");
  CHECK_FALSE(g.metadata.at("torch_version").empty());
  const std::vector<std::string> configurations = {
      "ln_gpt2_width", "ln_short_rows", "ln_vector_and_tail", "ln_long_rows", "ln_no_affine", "ln_weight_only",
      "ln_bias_only", "ln_two_dims", "ln_large_offset", "ln_eps", "gelu_none", "gelu_tanh", "gelu_none_rows",
      "erf", "emb_basic", "emb_wide", "emb_padding", "emb_padding_negative", "emb_scale_grad_by_freq",
      "emb_scale_and_padding", "emb_max_norm", "emb_max_norm_p1"};
  std::set<std::string> expected_cases, cases, expected_keys;
  for (const std::string& configuration : configurations) {
    expected_cases.insert(configuration + "_f32");
    expected_cases.insert(configuration + "_f64");
  }
  for (const json::Value& c : g.cases.as_array()) {
    const std::string& name = c.at("name").as_string();
    CAPTURE(name);
    CHECK(cases.insert(name).second);
    const DType dtype = *io::dtype_from_safetensors(c.at("dtype").as_string());
    for (const std::string& role : roles_for(c)) {
      const std::string key = name + "/" + role;
      expected_keys.insert(key);
      REQUIRE_MESSAGE(g.tensors.contains(key), key);
      CHECK(g.tensors.at(key).dtype() == (role == "indices" ? DType::i64 : dtype));
    }
  }
  CHECK(cases == expected_cases);
  std::vector<std::string> keys = g.tensors.keys();
  CHECK(std::set<std::string>(keys.begin(), keys.end()) == expected_keys);
  CHECK(g.tensors.at("ln_two_dims_f32/output").sizes() == ts::Shape{2, 3, 4, 5});
  CHECK(g.tensors.at("emb_basic_f64/output").sizes() == ts::Shape{2, 6, 4});
}

TEST_CASE("layers golden: layer_norm, gelu, erf and embedding match PyTorch") {
  for (const json::Value& c : golden_file().cases.as_array()) {
    CAPTURE(c.at("name").as_string());
    run_case(c);
  }
  golden_check::print_report();
}

TEST_CASE("layer_norm and the embedding gradient are PyTorch's to the bit") {
  // The claim of cpu/layer_norm.cpp and cpu/embedding.cpp: the same operations in the same
  // order as PyTorch 1.13's x86 CPU kernels. max_norm is left out (its norm is summed
  // differently, see tolerance_for).
  for (const json::Value& c : golden_file().cases.as_array()) {
    const std::string& op = c.at("op").as_string();
    if (op != "layer_norm" && !(op == "embedding" && c.at("max_norm").is_null())) continue;
    const std::string& name = c.at("name").as_string();
    CAPTURE(name);
    golden_check::error_stats().clear();
    run_case(c);
    for (const auto& [key, stats] : golden_check::error_stats()) CHECK(stats.max_abs == 0.0);
  }
}
