// ResNet-18 against torchvision 0.14 (tests/models/make_resnet_reference.py): the same
// state_dict layout (names, dtypes, shapes, order), and on the same weights and input the
// same logits, loss, input gradient, parameter gradients and updated batch-norm buffers,
// in train and eval mode, in float32 and float64. The weights come from a formula both
// sides compute bit for bit (resnet_recipe.h); they reach the model as torchvision-named
// tensors through a safetensors file and load_state_dict, the path converted torchvision
// weights take.
//
// Comparisons are normwise: ||tessera - torch|| / ||torch|| per tensor; each parameter's
// probe dot product relative to its gradient's norm. Tolerances and measured errors are
// at tolerance() below.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <tessera/tessera.h>

#include "resnet_recipe.h"
#include "temp_dir.h"
#include "test_support.h"

namespace ts = tessera;
namespace nn = tessera::nn;
namespace json = tessera::io::json;
using test_support::relative_difference;
using ts::DType;
using ts::Shape;
using ts::Tensor;

namespace {

struct Reference {
  ts::StateDict tensors;
  ts::io::Metadata metadata;
};

std::string source_path(const std::string& relative) {
  const char* dir = std::getenv("TESSERA_SOURCE_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "TESSERA_SOURCE_DIR is not set (meson test sets it)");
  return std::string(dir) + "/" + relative;
}

const Reference& reference() {
  static const Reference loaded = [] {
    const std::string path = source_path("tests/models/resnet18_reference.safetensors");
    return Reference{ts::io::load(path), ts::io::load_metadata(path)};
  }();
  return loaded;
}

bool reporting() { return std::getenv("TESSERA_REPORT") != nullptr; }

// The allowed normwise relative error, per dtype. Measured (TESSERA_REPORT=1, x86-64,
// torch 1.13), the largest over logits, loss, gradients and buffers:
//   float64: train 4.9e-14, eval 2.6e-14 (summation order only: GEMM blocking, batch-norm
//     reductions); bound 1e-12.
//   float32: train 6.7e-6, eval 5.8e-6 (rounding through 20 convolutions and batch norms,
//     which in train mode divide by statistics of as few as 16 values per channel);
//     bound 5e-5. This holds because the reference input keeps every activation at
//     least 8e-6 from a ReLU kink or max-pool tie (see the script): one activation on the
//     other side of a kink changes its gradient outright (0.4% of the input gradient
//     with the first input tried).
double tolerance(DType dtype) { return dtype == DType::f64 ? 1e-12 : 5e-5; }

void expect_close(const Tensor& actual, const Tensor& expected, DType dtype, const std::string& what) {
  CAPTURE(what);
  REQUIRE(actual.sizes() == expected.sizes());
  const double error = relative_difference(actual, expected);
  if (reporting()) MESSAGE(what, ": normwise relative error ", error);
  CHECK(error <= tolerance(dtype));
}

std::vector<std::string> json_strings(const std::string& text) {
  std::vector<std::string> out;
  const json::Value parsed = json::parse(text);
  for (const json::Value& v : parsed.as_array()) out.push_back(v.as_string());
  return out;
}

// Builds ResNet-18 in `dtype` and loads the recipe's weights, in float32 through a
// safetensors file (the path converted torchvision weights take).
ts::nn::ModuleHolder<ts::models::ResNet> recipe_model(DType dtype, const std::filesystem::path& scratch) {
  auto model = ts::models::resnet18();
  if (dtype != DType::f32) model->to(dtype);
  ts::StateDict weights;
  for (const auto& [name, value] : resnet_recipe::resnet18_f64()) {
    weights.insert(name, value.dtype() == DType::i64 ? value : value.to(dtype));
  }
  if (dtype == DType::f32) {
    const std::string file = (scratch / "recipe.safetensors").string();
    ts::io::save(weights, file);
    weights = ts::io::load(file);
  }
  model->load_state_dict(weights);
  return model;
}

void check_mode(DType dtype, bool train) {
  const std::string tag = std::string(dtype == DType::f32 ? "f32/" : "f64/") + (train ? "train" : "eval");
  CAPTURE(tag);
  const Reference& ref = reference();
  ts::testing::TempDir scratch;
  auto model = recipe_model(dtype, scratch.path());
  model->train(train);

  Tensor x = resnet_recipe::input(dtype).requires_grad_();
  std::vector<int64_t> targets;
  const json::Value target_list = json::parse(ref.metadata.at("targets"));
  for (const json::Value& v : target_list.as_array()) targets.push_back(v.as_int());
  Tensor logits = model(x);
  Tensor loss = ts::cross_entropy(logits, ts::tensor<int64_t>(targets));
  loss.backward();

  expect_close(logits, ref.tensors.at(tag + "/logits"), dtype, tag + " logits");
  expect_close(loss, ref.tensors.at(tag + "/loss"), dtype, tag + " loss");
  expect_close(x.grad(), ref.tensors.at(tag + "/grad_input"), dtype, tag + " input gradient");

  // Every parameter's gradient: its norm, and its dot product with a fixed probe vector.
  std::map<std::string, int64_t> number;  // state_dict position, the recipe's p
  for (const auto& [name, tensor] : model->state_dict()) number.emplace(name, static_cast<int64_t>(number.size()));
  std::vector<double> norms, dots;
  for (const auto& [name, param] : model->named_parameters()) {
    Tensor g = param.grad().to(DType::f64).flatten();
    std::vector<double> probe = resnet_recipe::signed_unit(number.at(name) + resnet_recipe::kProbeOffset, g.numel());
    norms.push_back(std::sqrt(g.pow(2.0).sum().item<double>()));
    dots.push_back((g * ts::tensor<double>(probe)).sum().item<double>());
  }
  REQUIRE(norms.size() == 62);
  expect_close(ts::tensor<double>(norms), ref.tensors.at(tag + "/grad_norms"), dtype, tag + " gradient norms");
  const Tensor& expected_dots = ref.tensors.at(tag + "/grad_dots");
  double worst_dot = 0;
  for (int64_t i = 0; i < expected_dots.numel(); ++i) {
    // Each dot compared relative to its parameter's gradient norm (the dot's natural scale).
    worst_dot = std::max(worst_dot, std::abs(dots[i] - expected_dots.at<double>({i})) /
                                        std::max(ref.tensors.at(tag + "/grad_norms").at<double>({i}), 1e-30));
  }
  if (reporting()) MESSAGE(tag, " gradient probe dots: largest error relative to the gradient norm ", worst_dot);
  CHECK(worst_dot <= tolerance(dtype));

  if (dtype == DType::f32) {
    std::map<std::string, Tensor> params;
    for (const auto& [name, param] : model->named_parameters()) params.emplace(name, param);
    for (const std::string& name : json_strings(ref.metadata.at("full_gradients"))) {
      expect_close(params.at(name).grad(), ref.tensors.at(tag + "/grad/" + name), dtype, tag + " gradient of " + name);
    }
  }
  if (train) {
    int buffers = 0;
    for (const auto& [name, buffer] : model->named_buffers()) {
      const Tensor& expected = ref.tensors.at(tag + "/buffer/" + name);
      if (buffer.dtype() == DType::i64) {
        CHECK(buffer.item<int64_t>() == expected.item<int64_t>());
      } else {
        expect_close(buffer, expected, dtype, tag + " " + name);
      }
      ++buffers;
    }
    CHECK(buffers == 60);
  }
}

}  // namespace

TEST_CASE("ResNet-18 has torchvision's state_dict: names, dtypes and shapes, in order") {
  auto model = ts::models::resnet18();
  json::Value layout = json::parse(reference().metadata.at("state_dict"));
  ts::StateDict state = model->state_dict();
  REQUIRE(state.size() == layout.as_array().size());
  size_t i = 0;
  for (const auto& [name, tensor] : state) {
    const json::Array& entry = layout.as_array()[i++].as_array();
    CAPTURE(name);
    CHECK(name == entry[0].as_string());
    CHECK(std::string(tensor.dtype() == DType::i64 ? "int64" : "float32") == entry[1].as_string());
    Shape shape;
    for (const json::Value& extent : entry[2].as_array()) shape.push_back(extent.as_int());
    CHECK(tensor.sizes() == shape);
  }
  int64_t parameters = 0;
  for (const Tensor& p : model->parameters()) parameters += p.numel();
  CHECK(parameters == 11'689'512);  // torchvision: sum(p.numel() for p in resnet18().parameters())
}

TEST_CASE("the weight recipe gives the reference script's values bit for bit") {
  const ts::StateDict& recipe = resnet_recipe::resnet18_f64();
  json::Value checksums = json::parse(reference().metadata.at("weight_checksums"));
  int checked = 0;
  for (const auto& [name, value] : checksums.as_object()) {
    CAPTURE(name);
    CHECK(resnet_recipe::xor_checksum(recipe.at(name)) == value.as_int());
    ++checked;
  }
  CHECK(checked == 102);  // every floating tensor: 62 parameters and 40 running statistics
  CHECK(resnet_recipe::xor_checksum(resnet_recipe::input(DType::f32)) == std::stoll(reference().metadata.at("input_checksum")));
}

TEST_CASE("ResNet-18 forward and backward match torchvision in train mode, float32") { check_mode(DType::f32, true); }
TEST_CASE("ResNet-18 forward and backward match torchvision in eval mode, float32") { check_mode(DType::f32, false); }
TEST_CASE("ResNet-18 forward and backward match torchvision in train mode, float64") { check_mode(DType::f64, true); }
TEST_CASE("ResNet-18 forward and backward match torchvision in eval mode, float64") { check_mode(DType::f64, false); }

TEST_CASE("a state dict with torchvision's names but other shapes or keys is refused, naming them") {
  auto model = ts::models::resnet18();
  ts::StateDict state = model->state_dict();
  // A 10-class head, as a fine-tuned checkpoint would have.
  state.at("fc.weight") = ts::zeros({10, 512});
  state.at("fc.bias") = ts::zeros({10});
  state.erase("layer3.1.bn2.num_batches_tracked");
  state.insert("layer5.0.conv1.weight", ts::zeros({1}));
  std::string message;
  try {
    model->load_state_dict(state);
  } catch (const ts::ValueError& error) {
    message = error.what();
  }
  CHECK(message.find("fc.weight: checkpoint [10, 512], model [1000, 512]") != std::string::npos);
  CHECK(message.find("fc.bias: checkpoint [10], model [1000]") != std::string::npos);
  CHECK(message.find("missing keys:\n    layer3.1.bn2.num_batches_tracked") != std::string::npos);
  CHECK(message.find("unexpected keys:\n    layer5.0.conv1.weight") != std::string::npos);
  // Non-strict loading still refuses wrong shapes (as PyTorch does).
  CHECK_THROWS_AS(model->load_state_dict(state, false), ts::ValueError);
  // ... and a 10-class model takes that head.
  auto small = ts::models::resnet18({.num_classes = 10});
  state.erase("layer5.0.conv1.weight");
  small->load_state_dict(state, false);
  CHECK(small->fc.weight.abs().sum().item<float>() == 0.0f);
}

TEST_CASE("ResNet structure and initialisation follow torchvision") {
  auto model = ts::models::resnet18();
  int blocks = 0;
  std::vector<std::string> downsampled;
  for (const auto& [name, module] : model->named_modules()) {
    if (module->type_name() == "BasicBlock") {
      ++blocks;
      if (static_cast<ts::models::BasicBlock*>(module)->downsample) downsampled.push_back(name);
    }
  }
  CHECK(blocks == 8);
  CHECK(downsampled == std::vector<std::string>{"layer2.0", "layer3.0", "layer4.0"});
  CHECK(model(ts::zeros({2, 3, 32, 32})).sizes() == Shape{2, 1000});

  // kaiming_normal_(fan_out): layer1.0.conv1 has fan_out 64 * 9, so std sqrt(2 / 576).
  Tensor w = model->layer1[0].named_parameters().front().second;
  const double std_expected = std::sqrt(2.0 / 576.0);
  const double mean = w.mean().item<float>(), std_actual = std::sqrt((w - mean).pow(2.0).mean().item<float>());
  CHECK(std::abs(mean) < 0.05 * std_expected);
  CHECK(std::abs(std_actual / std_expected - 1.0) < 0.02);  // 36864 draws: the sample std is within 1%
  CHECK(model->bn1.weight.to_vector<float>() == std::vector<float>(64, 1.0f));
  CHECK(model->bn1.bias.to_vector<float>() == std::vector<float>(64, 0.0f));
  const float fc_bound = 1.0f / std::sqrt(512.0f);
  CHECK(model->fc.weight.abs().max().item<float>() <= fc_bound);

  auto zero_init = ts::models::resnet18({.zero_init_residual = true});
  auto& block = static_cast<ts::models::BasicBlock&>(zero_init->layer2[1]);
  CHECK(block.bn2.weight.abs().sum().item<float>() == 0.0f);
  CHECK(block.bn1.weight.sum().item<float>() == 128.0f);

  // Initialisation is keyed by (seed, name, index): two models with one seed agree.
  auto a = ts::models::resnet18(), b = ts::models::resnet18();
  a->reset_parameters(5);
  b->reset_parameters(5);
  CHECK(ts::eq(a->layer3[0].named_parameters()[0].second, b->layer3[0].named_parameters()[0].second).sum().item<int64_t>() ==
        256 * 128 * 9);

  auto narrow = ts::models::resnet18({.num_classes = 7, .width = 8});
  CHECK(narrow->fc.weight.sizes() == Shape{7, 64});
  CHECK(narrow(ts::zeros({2, 3, 32, 32})).sizes() == Shape{2, 7});
  auto deeper = ts::models::resnet34();
  CHECK(deeper->layer3.size() == 6);
  CHECK_THROWS_WITH_AS(model(ts::zeros({2, 1, 32, 32})), doctest::Contains("expected images [N, 3, H, W]"),
                       ts::ShapeError);
}
