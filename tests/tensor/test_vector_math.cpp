// The float functions behind the vectorised GELU (tensor/cpu/vector_math.h) against libm in
// float64, over dense sweeps of their ranges, in ulps of the float64 reference rounded to
// float; then GELU in float32 against its exact values. Bounds are the measured maxima
// rounded up.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <tessera/tensor/cpu/vector_math.h>
#include <tessera/tessera.h>

namespace ts = tessera;
namespace vm = tessera::cpu::vector_math;

namespace {

// |actual - reference| in units of the float spacing at the reference.
double ulps(float actual, double reference) {
  const float rounded = static_cast<float>(reference);
  const double spacing = std::max<double>(std::abs(std::nextafter(rounded, std::numeric_limits<float>::infinity()) - rounded),
                                          std::numeric_limits<float>::denorm_min());
  return std::abs(static_cast<double>(actual) - reference) / spacing;
}

template <class F, class R>
double worst_ulps(double low, double high, int samples, F f, R reference) {
  double worst = 0;
  for (int i = 0; i <= samples; ++i) {
    const float x = static_cast<float>(low + (high - low) * i / samples);
    worst = std::max(worst, ulps(f(x), reference(static_cast<double>(x))));
  }
  return worst;
}

}  // namespace

TEST_CASE("vector_math: exp, erf and 1 + erf within a few ulps of libm in float64") {
  constexpr int kSamples = 400000;
  CHECK(worst_ulps(-87.3, 88.7, kSamples, vm::exp, [](double x) { return std::exp(x); }) <= 1.5);
  CHECK(worst_ulps(-6, 6, kSamples, vm::erf, [](double x) { return std::erf(x); }) <= 3);
  CHECK(worst_ulps(-1e-3, 1e-3, kSamples, vm::erf, [](double x) { return std::erf(x); }) <= 3);
  // 1 + erf(x) = erfc(-x) keeps its relative accuracy deep into the negative tail.
  CHECK(worst_ulps(-9.1, 4, kSamples, vm::one_plus_erf, [](double x) { return std::erfc(-x); }) <= 5);
}

TEST_CASE("vector_math: special values") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(vm::exp(0.0f) == 1.0f);
  CHECK(vm::exp(-inf) == 0.0f);
  CHECK(vm::exp(-200.0f) == 0.0f);
  CHECK(vm::exp(inf) == inf);
  CHECK(vm::exp(100.0f) == inf);
  CHECK(std::isnan(vm::exp(nan)));
  CHECK(vm::erf(0.0f) == 0.0f);
  CHECK(std::signbit(vm::erf(-0.0f)));
  CHECK(vm::erf(inf) == 1.0f);
  CHECK(vm::erf(-inf) == -1.0f);
  CHECK(std::isnan(vm::erf(nan)));
  CHECK(vm::one_plus_erf(-inf) == 0.0f);
  CHECK(vm::one_plus_erf(inf) == 2.0f);
  CHECK(std::isnan(vm::one_plus_erf(nan)));
}

TEST_CASE("GELU in float32 agrees with the exact values to float32's precision, tails included") {
  // The reference is computed in float64 without cancellation (erfc, and 1 + tanh(u) =
  // 2 / (1 + e^-2u)), from the same float inputs. float32 rounds u = k (x + 0.044715 x^3)
  // and x^2 / 2 before the exponential, a relative error of a few ulps times |u| (or x^2)
  // in the result's tail: hence the bound (1 + |exponent|) * 4e-7, relative to the size of
  // the terms (so that the derivative's zero crossing at x = -0.75 is measured fairly).
  const double k = std::sqrt(2.0 / M_PI), kappa = 0.044715;
  ts::Tensor x32 = ts::arange(-14.0, 8.0, 1.0 / 256, {.dtype = ts::DType::f32}).requires_grad_();
  const std::vector<float> xs = x32.to_vector<float>();
  for (const char* form : {"none", "tanh"}) {
    const std::string name = form;
    CAPTURE(name);
    const bool tanh_form = name == "tanh";
    x32.set_grad({});
    ts::Tensor y32 = ts::gelu(x32, form);
    y32.sum().backward();
    const std::vector<float> y = y32.to_vector<float>(), dy = x32.grad().to_vector<float>();
    double worst_value = 0, worst_gradient = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const double x = xs[i];
      double value, left, right, exponent;
      if (tanh_form) {
        const double u = k * (x + kappa * x * x * x), e = std::exp(-2.0 * std::abs(u));
        const double one_plus_tanh = u >= 0 ? 2.0 / (1.0 + e) : 2.0 * e / (1.0 + e);
        value = 0.5 * x * one_plus_tanh;
        left = 0.5 * one_plus_tanh;
        right = 0.5 * x * 4.0 * e / ((1.0 + e) * (1.0 + e)) * k * (1.0 + 3.0 * kappa * x * x);
        exponent = 2.0 * std::abs(u);
      } else {
        const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
        value = x * cdf;
        left = cdf;
        right = x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
        exponent = 0.5 * x * x;
      }
      if (std::abs(value) < 1e-36) {  // exp flushes results below float's normal range to 0
        CHECK(std::abs(y[i]) <= 1e-36);
        continue;
      }
      const double scale = 1.0 + exponent;
      worst_value = std::max(worst_value, std::abs(y[i] - value) / (std::abs(value) * scale + 1e-45));
      worst_gradient = std::max(worst_gradient, std::abs(dy[i] - (left + right)) / ((std::abs(left) + std::abs(right)) * scale + 1e-45));
    }
    MESSAGE(name, ": worst scaled relative error of the value ", worst_value, ", of the gradient ", worst_gradient);
    CHECK(worst_value <= 4e-7);
    CHECK(worst_gradient <= 4e-7);
  }
}
