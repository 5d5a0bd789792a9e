// BatchNorm2d and AdaptiveAvgPool2d against PyTorch (tests/nn/make_norm_pool_reference.py
// wrote norm_pool_reference.safetensors): outputs, gradients, running statistics and
// num_batches_tracked, in float32 and float64; then the module surface (buffers, state
// dict names, printing, errors).
//
// Tolerance: |tessera - torch| <= atol + rtol * |torch| per element. The kernels follow
// PyTorch's CPU arithmetic (statistics accumulated in double, the same rounding points),
// so differences come only from summation order: float64 1e-12 each; float32 2e-6 each
// (values here are O(1); sums over 120 elements per channel).
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>
#include <tessera/tessera.h>

namespace ts = tessera;
namespace nn = tessera::nn;
using ts::DType;
using ts::Shape;
using ts::Tensor;

namespace {

const ts::StateDict& reference() {
  static const ts::StateDict tensors = [] {
    const char* dir = std::getenv("TESSERA_SOURCE_DIR");
    REQUIRE_MESSAGE(dir != nullptr, "TESSERA_SOURCE_DIR is not set (meson test sets it)");
    return ts::io::load(std::string(dir) + "/tests/nn/norm_pool_reference.safetensors");
  }();
  return tensors;
}

const Tensor& expected(const std::string& name) { return reference().at(name); }

// Largest |a - b| - (atol + rtol |b|) over elements; <= 0 means within tolerance.
void check_close(const Tensor& actual, const Tensor& want, DType dtype, const std::string& what) {
  CAPTURE(what);
  REQUIRE(actual.sizes() == want.sizes());
  const double tolerance = dtype == DType::f64 ? 1e-12 : 2e-6;
  std::vector<double> a = actual.to(DType::f64).to_vector<double>(), b = want.to(DType::f64).to_vector<double>();
  double worst = 0, largest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]) - tolerance * (1 + std::abs(b[i])));
    largest = std::max(largest, std::abs(a[i] - b[i]));
  }
  CHECK(worst <= 0);
  // TESSERA_REPORT=1 prints the largest difference of each comparison.
  if (std::getenv("TESSERA_REPORT") != nullptr) MESSAGE(what, " ", ts::dtype_name(dtype), ": max |a - b| = ", largest);
}

std::string prefix(DType dtype) { return dtype == DType::f32 ? "f32/" : "f64/"; }

void load_affine(nn::BatchNorm2d& bn, DType dtype) {
  bn.to(dtype);
  ts::NoGradGuard no_grad;
  bn.weight.copy_(expected(prefix(dtype) + "input/weight"));
  bn.bias.copy_(expected(prefix(dtype) + "input/bias"));
}

}  // namespace

TEST_CASE("BatchNorm2d matches PyTorch: training steps, running statistics, eval") {
  for (DType dtype : {DType::f32, DType::f64}) {
    CAPTURE(dtype);
    const std::string p = prefix(dtype) + "bn_momentum/";
    nn::BatchNorm2d bn(3);
    load_affine(bn, dtype);
    const Tensor grad = expected(prefix(dtype) + "input/grad");
    for (int step = 0; step < 3; ++step) {
      Tensor x = expected(prefix(dtype) + "input/x" + std::to_string(step)).clone().requires_grad_();
      Tensor y = bn(x);
      if (step == 0) {
        y.backward(grad);
        check_close(y, expected(p + "train_output"), dtype, "train output");
        check_close(x.grad(), expected(p + "train_grad_input"), dtype, "train grad input");
        check_close(bn.weight.grad(), expected(p + "train_grad_weight"), dtype, "train grad weight");
        check_close(bn.bias.grad(), expected(p + "train_grad_bias"), dtype, "train grad bias");
      }
      const std::string s = std::to_string(step);
      check_close(bn.running_mean, expected(p + "running_mean" + s), dtype, "running_mean " + s);
      check_close(bn.running_var, expected(p + "running_var" + s), dtype, "running_var " + s);
      CHECK(bn.num_batches_tracked.item<int64_t>() == expected(p + "num_batches_tracked" + s).item<int64_t>());
    }
    bn.eval();
    bn.zero_grad();
    Tensor running_mean = bn.running_mean.clone();
    Tensor x = expected(prefix(dtype) + "input/x0").clone().requires_grad_();
    Tensor y = bn(x);
    y.backward(grad);
    check_close(y, expected(p + "eval_output"), dtype, "eval output");
    check_close(x.grad(), expected(p + "eval_grad_input"), dtype, "eval grad input");
    check_close(bn.weight.grad(), expected(p + "eval_grad_weight"), dtype, "eval grad weight");
    check_close(bn.bias.grad(), expected(p + "eval_grad_bias"), dtype, "eval grad bias");
    // Eval leaves the buffers alone.
    CHECK(bn.running_mean.to_vector<double>() == running_mean.to_vector<double>());
    CHECK(bn.num_batches_tracked.item<int64_t>() == 3);
  }
}

TEST_CASE("BatchNorm2d with momentum=None keeps the cumulative average") {
  for (DType dtype : {DType::f32, DType::f64}) {
    CAPTURE(dtype);
    nn::BatchNorm2d bn(3, {.momentum = std::nullopt});
    bn.to(dtype);
    for (int step = 0; step < 3; ++step) {
      bn(expected(prefix(dtype) + "input/x" + std::to_string(step)));
      const std::string s = std::to_string(step);
      check_close(bn.running_mean, expected(prefix(dtype) + "bn_cumulative/running_mean" + s), dtype, "running_mean " + s);
      check_close(bn.running_var, expected(prefix(dtype) + "bn_cumulative/running_var" + s), dtype, "running_var " + s);
    }
  }
}

TEST_CASE("BatchNorm2d without affine or running statistics normalises by the batch in both modes") {
  for (DType dtype : {DType::f32, DType::f64}) {
    CAPTURE(dtype);
    nn::BatchNorm2d bn(3, {.affine = false, .track_running_stats = false});
    bn.to(dtype);
    CHECK(bn.parameters().empty());
    CHECK(bn.buffers().empty());
    for (const char* mode : {"train", "eval"}) {
      bn.train(std::string(mode) == "train");
      Tensor x = expected(prefix(dtype) + "input/x1").clone().requires_grad_();
      Tensor y = bn(x);
      y.backward(expected(prefix(dtype) + "input/grad"));
      check_close(y, expected(prefix(dtype) + "bn_plain/" + mode + "_output"), dtype, std::string(mode) + " output");
      check_close(x.grad(), expected(prefix(dtype) + "bn_plain/" + mode + "_grad_input"), dtype, std::string(mode) + " grad");
    }
  }
}

TEST_CASE("AdaptiveAvgPool2d matches PyTorch for overlapping, global and upsampling bins") {
  for (DType dtype : {DType::f32, DType::f64}) {
    CAPTURE(dtype);
    for (ts::Size2 size : {ts::Size2{3, 2}, ts::Size2{1, 1}, ts::Size2{4, 6}}) {
      const std::string name = prefix(dtype) + "pool_" + std::to_string(size.h) + "x" + std::to_string(size.w) + "/";
      nn::AdaptiveAvgPool2d pool(size);
      Tensor x = expected(prefix(dtype) + "input/pool_x").clone().requires_grad_();
      Tensor y = pool(x);
      Tensor g = ts::arange(static_cast<double>(y.numel()), {.dtype = dtype}).view(y.sizes()) / 10.0 - 1.0;
      y.backward(g);
      check_close(y, expected(name + "output"), dtype, name + "output");
      check_close(x.grad(), expected(name + "grad_input"), dtype, name + "grad_input");
    }
  }
}

TEST_CASE("BatchNorm2d registers PyTorch's parameters and buffers and prints like it") {
  struct Net : nn::Module {
    nn::BatchNorm2d bn{4};
    Net() { register_module("bn", bn); }
  } net;
  std::vector<std::string> names;
  for (const auto& [name, tensor] : net.state_dict()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var",
                                          "bn.num_batches_tracked"});
  CHECK(net.parameters().size() == 2);
  CHECK(net.bn.weight.to_vector<float>() == std::vector<float>(4, 1.0f));
  CHECK(net.bn.bias.to_vector<float>() == std::vector<float>(4, 0.0f));
  CHECK(net.bn.running_var.to_vector<float>() == std::vector<float>(4, 1.0f));
  CHECK(net.bn.num_batches_tracked.dtype() == DType::i64);
  CHECK(net.bn.num_batches_tracked.dim() == 0);
  std::ostringstream printed;
  printed << net.bn;
  CHECK(printed.str() == "BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  nn::AdaptiveAvgPool2d global_pool(1);
  std::ostringstream pool;
  pool << global_pool;
  CHECK(pool.str() == "AdaptiveAvgPool2d(output_size=1)");  // as torch prints AdaptiveAvgPool2d(1)

  // to(f64) converts the floating buffers and leaves the counter an integer.
  net.to(DType::f64);
  CHECK(net.bn.running_mean.dtype() == DType::f64);
  CHECK(net.bn.num_batches_tracked.dtype() == DType::i64);

  // A loaded state dict sets the buffers too.
  ts::StateDict state = net.state_dict();
  state.at("bn.running_mean") = ts::full({4}, 2.5, {.dtype = DType::f64});
  state.at("bn.num_batches_tracked") = ts::full({}, 7, {.dtype = DType::i64});
  net.load_state_dict(state);
  CHECK(net.bn.running_mean.to_vector<double>() == std::vector<double>(4, 2.5));
  CHECK(net.bn.num_batches_tracked.item<int64_t>() == 7);
  net.bn.reset_running_stats();
  CHECK(net.bn.num_batches_tracked.item<int64_t>() == 0);
  CHECK(net.bn.running_mean.to_vector<double>() == std::vector<double>(4, 0.0));
}

TEST_CASE("BatchNorm2d and batch_norm refuse bad inputs with clear errors") {
  nn::BatchNorm2d bn(3);
  CHECK_THROWS_WITH_AS(bn(ts::zeros({2, 3, 4})), doctest::Contains("expected an input [N, C, H, W] with C = 3, got [2, 3, 4]"),
                       ts::ShapeError);
  CHECK_THROWS_WITH_AS(bn(ts::zeros({2, 4, 2, 2})), doctest::Contains("expected 3 channels, got input of shape [2, 4, 2, 2]"),
                       ts::ShapeError);
  // One value per channel has no variance, as PyTorch says.
  CHECK_THROWS_WITH_AS(bn(ts::zeros({1, 3, 1, 1})), doctest::Contains("expected more than 1 value per channel when training"),
                       ts::ValueError);
  bn.eval();
  CHECK(bn(ts::ones({1, 3, 1, 1})).sizes() == Shape{1, 3, 1, 1});  // fine in eval
  CHECK_THROWS_WITH_AS(ts::batch_norm(ts::zeros({2, 3, 2, 2}), {}, {}, {}, {}, false),
                       doctest::Contains("running statistics, which are undefined"), ts::ValueError);
  CHECK_THROWS_WITH_AS(ts::batch_norm(ts::zeros({2, 3, 2, 2}), ts::zeros({4}), ts::ones({4})),
                       doctest::Contains("running_mean must be [3]"), ts::ShapeError);
  CHECK_THROWS_AS(nn::BatchNorm2d(0), ts::ValueError);
  CHECK_THROWS_AS(nn::BatchNorm2d(3, {.momentum = 1.5}), ts::ValueError);
  CHECK_THROWS_WITH_AS(ts::adaptive_avg_pool2d(ts::zeros({2, 3, 4}), 1), doctest::Contains("expected a 4-D input"),
                       ts::ShapeError);
  CHECK_THROWS_AS(ts::adaptive_avg_pool2d(ts::zeros({1, 1, 4, 4}), {0, 1}), ts::ValueError);
}
