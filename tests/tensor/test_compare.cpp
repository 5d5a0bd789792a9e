// ts::equal and ts::allclose: torch.equal's and torch.allclose's answers on the same inputs
// (shapes, broadcasting, infinities, NaN, the tolerance's edge); ts::first_non_finite.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>
#include <tessera/tessera.h>

namespace ts = tessera;

TEST_CASE("equal: the same shape and every element equal, as torch.equal") {
  ts::Tensor a = ts::tensor<float>({1, 2, 3, 4}, {2, 2});
  CHECK(ts::equal(a, a.clone()));
  CHECK_FALSE(ts::equal(a, a.view({4})));                        // another shape
  CHECK_FALSE(ts::equal(a, ts::tensor<float>({1, 2, 3, 5}, {2, 2})));
  CHECK_FALSE(ts::equal(ts::ones({2, 2}), ts::ones({2})));       // no broadcasting
  CHECK(ts::equal(a > 2.0, ts::tensor<bool>({false, false, true, true}, {2, 2})));
  CHECK(ts::equal(a.t(), ts::tensor<float>({1, 3, 2, 4}, {2, 2})));  // strided views compare by value
  CHECK_THROWS_AS(ts::equal(ts::Tensor(), a), ts::ValueError);
}

TEST_CASE("allclose: |a - b| <= atol + rtol * |b|, broadcast, NaN never close, as torch.allclose") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  ts::Tensor b = ts::tensor<double>({1.0, 100.0});
  // The edge: rtol * |b| + atol is 1e-5 + 1e-8 at 1 and 1e-3 + 1e-8 at 100.
  CHECK(ts::allclose(ts::tensor<double>({1.0 + 1e-5, 100.0 + 9.9e-4}), b));
  CHECK_FALSE(ts::allclose(ts::tensor<double>({1.0 + 2e-5, 100.0}), b));
  CHECK(ts::allclose(ts::tensor<double>({1.1, 110.0}), b, /*rtol=*/0.1));
  CHECK(ts::allclose(ts::tensor<double>({1.5, 100.5}), b, /*rtol=*/0, /*atol=*/0.5));
  CHECK(ts::allclose(ts::ones({3, 2}), ts::ones({2})));          // broadcast
  CHECK(ts::allclose(ts::tensor<float>({inf, -inf}), ts::tensor<float>({inf, -inf})));
  CHECK_FALSE(ts::allclose(ts::tensor<float>({inf}), ts::tensor<float>({-inf})));
  CHECK_FALSE(ts::allclose(ts::tensor<float>({nan}), ts::tensor<float>({nan})));
  ts::Tensor w = ts::ones({2}).requires_grad_();
  CHECK(ts::allclose(w, ts::ones({2})));
  CHECK(w.grad_fn() == nullptr);                                 // nothing recorded
  CHECK_THROWS_AS(ts::allclose(b, b, -1.0), ts::ValueError);
}

TEST_CASE("first_non_finite: the flat index of the first NaN or infinity, as torch.isfinite(x).logical_not().nonzero()[0]") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  CHECK_FALSE(ts::first_non_finite(ts::tensor<float>({1, -2, 3e38f, 0}, {2, 2})).has_value());
  CHECK(ts::first_non_finite(ts::tensor<float>({1, 2, 3, static_cast<float>(nan)}, {2, 2})) == 3);
  CHECK(ts::first_non_finite(ts::tensor<double>({1, -inf, nan})) == 1);
  CHECK(ts::first_non_finite(ts::tensor<double>({inf})) == 0);
  CHECK(ts::first_non_finite(ts::tensor<float>({1, 2, static_cast<float>(nan), 4}, {2, 2}).t()) == 1);  // row-major order of the view
  CHECK(ts::first_non_finite(ts::tensor<float>({1, static_cast<float>(inf)}).to(ts::DType::bf16)) == 1);
  CHECK_FALSE(ts::first_non_finite(ts::tensor<int64_t>({1, 2})).has_value());  // integers are always finite
  CHECK_FALSE(ts::first_non_finite(ts::zeros({0})).has_value());
  CHECK_THROWS_AS(ts::first_non_finite(ts::Tensor()), ts::ValueError);
  // The scan goes by blocks of 1024: the first bad element of a later block, and of the
  // first block when a later one has one too; a subnormal and the largest float are finite.
  std::vector<float> values(5000, 1.0f);
  values[17] = std::numeric_limits<float>::denorm_min();
  values[1023] = std::numeric_limits<float>::max();
  values[3000] = static_cast<float>(-inf);
  values[4999] = static_cast<float>(nan);
  CHECK(ts::first_non_finite(ts::tensor<float>(values)) == 3000);
  values[1500] = static_cast<float>(nan);
  CHECK(ts::first_non_finite(ts::tensor<float>(values)) == 1500);
  CHECK(ts::first_non_finite(ts::tensor<float>(values).to(ts::DType::f64)) == 1500);
  // The largest float rounds to infinity in bfloat16 (as torch's .bfloat16() does).
  CHECK(ts::first_non_finite(ts::tensor<float>(values).to(ts::DType::bf16)) == 1023);
}
