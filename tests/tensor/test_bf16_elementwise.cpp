// bfloat16 element-wise ops on the CPU (src/tensor/cpu/elementwise.cpp): each operand widened
// to float32, the float32 result rounded to bfloat16 once, as PyTorch's CPU kernels do.
//
// Against PyTorch 1.13 on the same operands (tests/tensor/bf16_elementwise_reference.safetensors,
// written by make_bf16_elementwise_reference.py): arithmetic, comparisons, relu and its
// gradient, neg/abs/sign are the correctly rounded float32 result rounded once, the same in
// both libraries, so they must agree bit for bit. exp, log, sigmoid, tanh, sin and cos round
// a float32 value that PyTorch takes from Sleef (within 1 float32 ulp) and Tessera from the C
// library (within 1 ulp): the two float32 values can straddle a bfloat16 rounding boundary,
// so those may differ by one bfloat16 step (measured: none of the 231 values of any of them).
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <tessera/tensor/native.h>
#include <tessera/tessera.h>
#include "support/bf16_bits.h"
#include <vector>

namespace ts = tessera;
using ts::BFloat16;
using ts::DType;
using ts::Tensor;
using ts::native::BinaryOp;
using ts::native::UnaryOp;

namespace {

const ts::StateDict& torch_reference() {
  static const ts::StateDict file = [] {
    const char* dir = std::getenv("TESSERA_SOURCE_DIR");
    REQUIRE_MESSAGE(dir != nullptr, "TESSERA_SOURCE_DIR is not set (meson test sets it)");
    return ts::io::load(std::string(dir) + "/tests/tensor/bf16_elementwise_reference.safetensors");
  }();
  return file;
}

const Tensor& entry(const std::string& name) {
  const ts::StateDict& file = torch_reference();
  REQUIRE_MESSAGE(file.contains(name), "no entry '", name, "' in bf16_elementwise_reference.safetensors");
  return file.at(name);
}

using test_support::bf16_bits;
using test_support::bf16_steps_apart;


// The largest distance in bfloat16 steps between `got` and PyTorch's entry `name`.
int64_t steps_from_torch(const Tensor& got, const std::string& name) {
  const Tensor& expected = entry(name);
  REQUIRE(got.dtype() == DType::bf16);
  REQUIRE(got.sizes() == expected.sizes());
  std::vector<uint16_t> g = bf16_bits(got), e = bf16_bits(expected);
  int64_t worst = 0;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, bf16_steps_apart(g[i], e[i]));
  return worst;
}

}  // namespace

TEST_CASE("bfloat16 unary ops against PyTorch 1.13's") {
  const std::map<std::string, UnaryOp> exact = {{"neg", UnaryOp::neg}, {"abs", UnaryOp::abs},
                                                {"sign", UnaryOp::sign}, {"relu", UnaryOp::relu},
                                                {"sqrt", UnaryOp::sqrt}, {"reciprocal", UnaryOp::reciprocal}};
  const std::map<std::string, UnaryOp> libm = {{"exp", UnaryOp::exp}, {"log", UnaryOp::log},
                                               {"sigmoid", UnaryOp::sigmoid}, {"tanh", UnaryOp::tanh},
                                               {"sin", UnaryOp::sin}, {"cos", UnaryOp::cos}};
  auto operand = [](const std::string& name) {
    bool positive = name == "log" || name == "sqrt" || name == "reciprocal";
    return entry(positive ? "positive" : "a");
  };
  for (const auto& [name, op] : exact) {
    CAPTURE(name);
    CHECK(steps_from_torch(ts::native::unary(op, operand(name)), name) <= 1);
  }
  for (const auto& [name, op] : libm) {
    CAPTURE(name);
    CHECK(steps_from_torch(ts::native::unary(op, operand(name)), name) <= 1);
  }
  // The public functions take the same path.
  CHECK(steps_from_torch(ts::exp(entry("a")), "exp") <= 1);
  CHECK(steps_from_torch(ts::relu(entry("a")), "relu") == 0);
}

TEST_CASE("bfloat16 binary ops and comparisons against PyTorch 1.13's, bit for bit") {
  const Tensor& a = entry("a");
  const Tensor& b = entry("b");  // [33], broadcast over a's 7 rows
  const std::map<std::string, BinaryOp> arithmetic = {{"add", BinaryOp::add},         {"sub", BinaryOp::sub},
                                                      {"mul", BinaryOp::mul},         {"div", BinaryOp::div},
                                                      {"maximum", BinaryOp::maximum}, {"minimum", BinaryOp::minimum}};
  for (const auto& [name, op] : arithmetic) {
    CAPTURE(name);
    CHECK(steps_from_torch(ts::native::binary(op, a, b), name) == 0);
  }
  CHECK(steps_from_torch(a + b, "add") == 0);
  CHECK(steps_from_torch(a * b, "mul") == 0);
  CHECK(steps_from_torch(a + 0.1, "add_scalar") == 0);

  const std::map<std::string, BinaryOp> comparisons = {{"eq", BinaryOp::eq}, {"ne", BinaryOp::ne},
                                                       {"lt", BinaryOp::lt}, {"le", BinaryOp::le},
                                                       {"gt", BinaryOp::gt}, {"ge", BinaryOp::ge}};
  for (const auto& [name, op] : comparisons) {
    CAPTURE(name);
    Tensor got = ts::native::binary(op, a, b);
    REQUIRE(got.dtype() == DType::boolean);
    CHECK(ts::equal(got, entry(name)));
  }
  CHECK(ts::eq(a, b).sum().item<int64_t>() > 0);  // the file's ties are there
}

// PyTorch 1.13 rounds alpha (and a scalar operand) to bfloat16 before the float32 arithmetic:
// 0.3 becomes 0.30078125, which moves results that cancel by up to 42 bfloat16 steps in this
// file (measured with alpha kept in float32), so the test tells the two rules apart. Rows of
// 32: PyTorch's scalar loop over a row's tail beyond its 32-wide vectors rounds alpha * b to
// bfloat16 as well, a second rounding Tessera does not copy (make_bf16_sgd_reference.py).
TEST_CASE("bfloat16 in-place add with alpha: alpha rounded to bfloat16, the sum in float32, one rounding") {
  Tensor a = entry("a").narrow(1, 0, 32).contiguous();
  a.add_(entry("b").narrow(0, 0, 32), 0.3);
  CHECK(steps_from_torch(a, "add_scaled") == 0);
  // 1 + 2^-8 lies halfway between bfloat16's 1 and 1 + 2^-7: rounds to even, to 1.
  Tensor one = ts::ones({3}, {.dtype = DType::bf16});
  one.add_(ts::full({3}, 1.0 / 256, {.dtype = DType::bf16}));
  CHECK(static_cast<float>(one.data_ptr<BFloat16>()[0]) == 1.0f);
  one.add_(ts::full({3}, 3.0 / 512, {.dtype = DType::bf16}));  // 1 + 0.00586: nearer 1 + 2^-7
  CHECK(static_cast<float>(one.data_ptr<BFloat16>()[2]) == 1.0f + 1.0f / 128);
}

TEST_CASE("bfloat16 relu backward through autograd, against PyTorch 1.13's") {
  Tensor x = entry("a").clone().requires_grad_(true);
  ts::relu(x).backward(entry("grad"));
  REQUIRE(x.grad().defined());
  CHECK(steps_from_torch(x.grad(), "relu_backward") == 0);
}

TEST_CASE("bfloat16 logical ops read nonzero, as float32's") {
  Tensor a = ts::tensor(std::vector<double>{0.0, 1.5, -2.0, 0.0}).to(DType::bf16);
  Tensor b = ts::tensor(std::vector<double>{0.0, 0.0, 3.0, 4.0}).to(DType::bf16);
  CHECK(ts::equal(ts::native::binary(BinaryOp::logical_and, a, b), ts::tensor(std::vector<double>{0.0, 0.0, 1.0, 0.0}).to(DType::boolean)));
  CHECK(ts::equal(ts::native::binary(BinaryOp::logical_xor, a, b), ts::tensor(std::vector<double>{0.0, 1.0, 0.0, 1.0}).to(DType::boolean)));
}
