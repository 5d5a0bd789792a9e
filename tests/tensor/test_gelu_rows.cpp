// The float32 GELU and erf kernels (tensor/cpu/gelu.cpp, gelu_avx512.cpp) give exactly the
// bits of their element formulas (cpu/gelu_float.h, vector_math.h), on contiguous rows (the
// AVX-512 rows where the CPU has AVX-512; the `tensor-default` run repeats this on the
// portable loops) and on strided ones (always the element loop), over every kind of float:
// a dense sweep of [-16, 16], random bit patterns (huge, tiny, subnormal, infinite, NaN)
// and row lengths that leave a partial vector. This file is compiled with -ffp-contract=off,
// as the kernels are (tests/tensor/meson.build), so the formulas below are the kernels' own
// operations.
// Then erf against libm in float64 through the kernel (vector_math's own sweep in
// test_vector_math.cpp runs the header's functions, not the kernel's rows).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tessera/tensor/cpu/gelu_float.h>
#include <tessera/tensor/native.h>
#include <tessera/tessera.h>

namespace ts = tessera;
namespace gf = tessera::cpu::gelu_float;

namespace {

std::vector<float> sample_floats() {
  std::vector<float> xs;
  for (int i = -(1 << 17); i <= (1 << 17); ++i) xs.push_back(static_cast<float>(i) / 8192.0f);  // [-16, 16]
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                  -std::numeric_limits<float>::min(), std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                  -87.3365447f, 88.7228394f, 2.0f / 3.0f, -2.0f / 3.0f, 1.0f, -1.0f, 10.0f, -10.0f}) {
    xs.push_back(v);
  }
  std::mt19937 bits(20261201);
  for (int i = 0; i < (1 << 16); ++i) xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits())));
  xs.resize(xs.size() / 16 * 16 + 7);  // a partial last vector
  return xs;
}

// Equal bits, or both NaN (which NaN an operation with two NaN operands returns is not a
// property of the formulas).
bool same(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) || (a != a && b != b); }

template <class F>
int64_t mismatches(const ts::Tensor& out, const std::vector<float>& xs, F formula) {
  const std::vector<float> values = out.contiguous().to_vector<float>();
  int64_t count = 0;
  for (size_t i = 0; i < xs.size(); ++i) count += same(values[i], formula(i)) ? 0 : 1;
  return count;
}

}  // namespace

TEST_CASE("GELU and erf in float32: the AVX-512 rows give the element formulas' bits") {
  MESSAGE("kernels in use: ", ts::to_string(ts::cpu_capability()));
  const std::vector<float> xs = sample_floats();
  std::vector<float> dys(xs.size());
  std::mt19937 draw(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& dy : dys) dy = normal(draw);
  const auto n = static_cast<int64_t>(xs.size());
  const ts::Tensor x = ts::tensor(xs, {n}), dy = ts::tensor(dys, {n});
  // The same values read through a stride of 2 (the element loop on every CPU).
  const ts::Tensor x_strided = ts::stack({x, x}, 1).select(1, 0), dy_strided = ts::stack({dy, dy}, 1).select(1, 0);
  REQUIRE(!x_strided.is_contiguous());
  using ts::GeluApproximate;
  for (const auto& [input, grad, name] : {std::tuple{x, dy, "contiguous"}, std::tuple{x_strided, dy_strided, "strided"}}) {
    CAPTURE(std::string(name));
    CHECK(mismatches(ts::native::gelu(input, GeluApproximate::tanh), xs, [&](size_t i) { return gf::gelu_tanh(xs[i]); }) == 0);
    CHECK(mismatches(ts::native::gelu(input, GeluApproximate::none), xs, [&](size_t i) { return gf::gelu_exact(xs[i]); }) == 0);
    CHECK(mismatches(ts::native::gelu_backward(grad, input, GeluApproximate::tanh), xs,
                     [&](size_t i) { return gf::gelu_tanh_backward(dys[i], xs[i]); }) == 0);
    CHECK(mismatches(ts::native::gelu_backward(grad, input, GeluApproximate::none), xs,
                     [&](size_t i) { return gf::gelu_exact_backward(dys[i], xs[i]); }) == 0);
    CHECK(mismatches(ts::native::erf(input), xs, [&](size_t i) { return ts::cpu::vector_math::erf(xs[i]); }) == 0);
  }
}

TEST_CASE("erf in float32 through the kernel: within 3 ulps of libm in float64") {
  // vector_math::erf's measured bound (2.5 ulp, test_vector_math.cpp), now through the rows.
  const ts::Tensor x = ts::arange(-6.0, 6.0, 1.0 / 4096, {.dtype = ts::DType::f32});
  const std::vector<float> xs = x.to_vector<float>(), ys = ts::erf(x).to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double reference = std::erf(static_cast<double>(xs[i]));
    const float rounded = static_cast<float>(reference);
    const double spacing = std::max<double>(std::abs(std::nextafter(rounded, std::numeric_limits<float>::infinity()) - rounded),
                                            std::numeric_limits<float>::denorm_min());
    worst = std::max(worst, std::abs(static_cast<double>(ys[i]) - reference) / spacing);
  }
  MESSAGE("erf float32: worst ", worst, " ulps");
  CHECK(worst <= 3);
}
