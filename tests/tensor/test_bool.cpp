// The bool dtype (DType::boolean, printed "bool"): what comparisons return and masks are
// made of. PyTorch's rules: comparisons and logical ops give bool, ~ & | ^ are the logical
// ops on bool, a sum counts in int64, conversions read "nonzero", arithmetic is refused.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <tessera/tessera.h>
#include "test_support.h"

namespace ts = tessera;
using ts::DType;
using ts::Shape;
using ts::Tensor;

using test_support::contains;
using test_support::error_of;

namespace {
std::vector<bool> bools(const Tensor& t) {
  CHECK(t.dtype() == DType::boolean);
  return t.to_vector<bool>();
}
}  // namespace

TEST_CASE("bool: a one-byte dtype named as PyTorch names it") {
  CHECK(ts::element_size(DType::boolean) == 1);
  CHECK(ts::dtype_name(DType::boolean) == "bool");
  CHECK(ts::dtype_of<bool> == DType::boolean);
  CHECK_FALSE(ts::is_floating(DType::boolean));
  Tensor mask = ts::tensor<bool>({true, false, true, true}, {2, 2});
  CHECK(mask.sizes() == Shape{2, 2});
  CHECK(mask.nbytes() == 4);
  CHECK(bools(mask) == std::vector<bool>{true, false, true, true});
  CHECK(mask.at<bool>({0, 1}) == false);
  CHECK(mask[1].to_vector<uint8_t>() == std::vector<uint8_t>{1, 1});
  std::ostringstream printed;
  printed << mask;
  CHECK(printed.str() == "Tensor[2, 2] bool cpu\nTrue False\nTrue True");
  CHECK(bools(ts::ones({3}, {.dtype = DType::boolean})) == std::vector<bool>(3, true));
  CHECK(bools(ts::zeros({2}, {.dtype = DType::boolean})) == std::vector<bool>(2, false));
  CHECK(contains(error_of([&] { Tensor(mask).requires_grad_(); }), "only floating tensors can require grad, got bool"));
}

TEST_CASE("bool: comparisons of every dtype give bool, broadcast, and take scalars") {
  Tensor a = ts::tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row = ts::tensor<float>({2, 2, 9});
  CHECK(bools(a < row) == std::vector<bool>{true, false, true, false, false, true});
  CHECK(bools(a >= row) == std::vector<bool>{false, true, false, true, true, false});
  CHECK(bools(a == 3.0) == std::vector<bool>{false, false, true, false, false, false});
  CHECK(bools(a != 3.0) == std::vector<bool>{true, true, false, true, true, true});
  CHECK(bools(a > 4.5) == std::vector<bool>{false, false, false, false, true, true});
  CHECK(bools(a <= 2.0) == std::vector<bool>{true, true, false, false, false, false});
  CHECK(bools(ts::eq(ts::arange(4), ts::tensor<int64_t>({0, 0, 2, 2}))) == std::vector<bool>{true, false, true, false});
  CHECK(bools(ts::ne(ts::tensor<uint8_t>({0, 7}), ts::tensor<uint8_t>({0, 8}))) == std::vector<bool>{false, true});
  CHECK(bools(ts::gt(a.to(DType::f64), a.to(DType::f64).t().t())) == std::vector<bool>(6, false));
  // bool against bool; NaN compares unequal to itself.
  Tensor m = ts::tensor<bool>({true, false});
  CHECK(bools(m == ts::tensor<bool>({true, true})) == std::vector<bool>{true, false});
  CHECK(bools(m > ts::tensor<bool>({false, false})) == std::vector<bool>{true, false});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(bools(ts::tensor<float>({nan, 1}) == ts::tensor<float>({nan, 1})) == std::vector<bool>{false, true});
}

TEST_CASE("bool: logical ops read nonzero; ~ & | ^ are their mask forms") {
  Tensor p = ts::tensor<bool>({true, true, false, false});
  Tensor q = ts::tensor<bool>({true, false, true, false});
  CHECK(bools(~p) == std::vector<bool>{false, false, true, true});
  CHECK(bools(p & q) == std::vector<bool>{true, false, false, false});
  CHECK(bools(p | q) == std::vector<bool>{true, true, true, false});
  CHECK(bools(p ^ q) == std::vector<bool>{false, true, true, false});
  CHECK(bools(ts::logical_and(p, q.view({4, 1}))).size() == 16);  // broadcasts
  // Any dtype: nonzero is true, NaN included, -0.0 is zero.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = ts::tensor<double>({0.0, -0.0, 2.5, nan});
  CHECK(bools(ts::logical_not(x)) == std::vector<bool>{true, true, false, false});
  CHECK(bools(ts::logical_or(x, ts::zeros({4}, {.dtype = DType::f64}))) == std::vector<bool>{false, false, true, true});
  CHECK(bools(ts::logical_xor(ts::tensor<int64_t>({0, 3, 3}), ts::tensor<int64_t>({0, 0, -1}))) ==
        std::vector<bool>{false, true, false});
  CHECK(bools(ts::logical_and(ts::tensor<uint8_t>({1, 2, 0}), ts::tensor<uint8_t>({2, 0, 0}))) ==
        std::vector<bool>{true, false, false});
  // The operators are the bool forms only: on integers PyTorch means bitwise ops.
  std::string bitwise = error_of([&] { ~ts::arange(3); });
  CHECK(contains(bitwise, "operator~"));
  CHECK(contains(bitwise, "int64"));
  CHECK_THROWS_AS(ts::arange(3) & ts::arange(3), ts::DTypeError);
  CHECK_THROWS_AS(p | ts::arange(4), ts::DTypeError);
}

TEST_CASE("bool: arithmetic, negation and max are refused with a way out") {
  Tensor m = ts::tensor<bool>({true, false});
  std::string add = error_of([&] { m + m; });
  CHECK(contains(add, "add: arithmetic is not defined on bool tensors"));
  CHECK(contains(add, "logical_or"));
  CHECK_THROWS_AS(m * m, ts::DTypeError);
  CHECK(contains(error_of([&] { -m; }), "neg: not defined on bool tensors; logical_not (~) inverts a mask"));
  CHECK(contains(error_of([&] { m.amax({0}); }), "amax: not defined on bool tensors"));
  CHECK_THROWS_AS(m.max(0), ts::DTypeError);
}

TEST_CASE("bool: sum counts in int64, as torch") {
  Tensor m = ts::tensor<bool>({true, false, true, true, true, false}, {2, 3});
  CHECK(m.sum().dtype() == DType::i64);
  CHECK(m.sum().item<int64_t>() == 4);
  CHECK(m.sum({0}).to_vector<int64_t>() == std::vector<int64_t>{2, 1, 1});
  CHECK(m.t().sum({1}, true).to_vector<int64_t>() == std::vector<int64_t>{2, 1, 1});
  CHECK(ts::zeros({0}, {.dtype = DType::boolean}).sum().item<int64_t>() == 0);
  // The examples' accuracy count: argmax against the labels, summed.
  Tensor logits = ts::tensor<float>({0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f}, {3, 2});
  Tensor labels = ts::tensor<int64_t>({1, 1, 1});
  CHECK((logits.argmax(1) == labels).sum().item<int64_t>() == 2);
}

TEST_CASE("bool: where takes a bool condition only") {
  Tensor cond = ts::tensor<bool>({true, false, false, true}, {2, 2});
  Tensor a = ts::tensor<float>({1, 2, 3, 4}, {2, 2});
  CHECK(ts::where(cond, a, -a).to_vector<float>() == std::vector<float>{1, -2, -3, 4});
  CHECK(ts::where(cond.t(), a, ts::zeros({})).to_vector<float>() == std::vector<float>{1, 0, 0, 4});
  CHECK(bools(ts::where(cond, cond, ~cond)) == std::vector<bool>(4, true));
  std::string message = error_of([&] { ts::where(cond.to(DType::u8), a, a); });
  CHECK(contains(message, "where: condition must be bool, got uint8 of shape [2, 2]"));
  CHECK(contains(message, ".to(DType::boolean)"));
  CHECK_THROWS_AS(ts::where(cond, a, a.to(DType::f64)), ts::DTypeError);
}

TEST_CASE("bool: conversions read nonzero and write 0 or 1") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = ts::tensor<float>({0.0f, -0.0f, 0.25f, -3.0f, nan});
  CHECK(bools(x.to(DType::boolean)) == std::vector<bool>{false, false, true, true, true});
  CHECK(bools(ts::tensor<uint8_t>({0, 1, 2, 255}).to(DType::boolean)) == std::vector<bool>{false, true, true, true});
  CHECK(bools(ts::tensor<int64_t>({-1, 0}).to(DType::boolean)) == std::vector<bool>{true, false});
  CHECK(bools(x.to(DType::bf16).to(DType::boolean)) == std::vector<bool>{false, false, true, true, true});
  Tensor m = ts::tensor<bool>({true, false, true});
  CHECK(m.to(DType::f32).to_vector<float>() == std::vector<float>{1, 0, 1});
  CHECK(m.to(DType::f64).to_vector<double>() == std::vector<double>{1, 0, 1});
  CHECK(m.to(DType::i64).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  CHECK(m.to(DType::u8).to_vector<uint8_t>() == std::vector<uint8_t>{1, 0, 1});
  CHECK(m.to(DType::bf16).to_vector<float>() == std::vector<float>{1, 0, 1});
  CHECK(m.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  CHECK(m.select(0, 1).item<bool>() == false);
  // Raw bytes become valid bools: nonzero is true (a byte 2 must never reach a C++ bool).
  const uint8_t raw[3] = {0, 2, 1};
  Tensor from_bytes = ts::from_data(raw, {3}, DType::boolean);
  CHECK(from_bytes.to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 1});
  // Views, copies, fills and joins move bools as they are.
  Tensor grid = ts::tensor<bool>({true, false, false, false, true, true}, {2, 3});
  CHECK(bools(grid.t().contiguous()) == std::vector<bool>{true, false, false, true, false, true});
  Tensor filled = ts::zeros({2, 3}, {.dtype = DType::boolean});
  filled.copy_(ts::tensor<float>({0.0f, 1.5f, 0.0f}));
  CHECK(bools(filled) == std::vector<bool>{false, true, false, false, true, false});
  filled.fill_(1.0);
  CHECK(bools(filled) == std::vector<bool>(6, true));
  CHECK(bools(ts::cat({grid, ~grid}, 0)).size() == 12);
  CHECK(bools(grid.expand({2, 2, 3}).reshape({12})) ==
        std::vector<bool>{true, false, false, false, true, true, true, false, false, false, true, true});
}
