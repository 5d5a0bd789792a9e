// GELU's float32 formulas on one element: the definition both CPU kernels compute, the
// portable element loop of cpu/gelu.cpp and the AVX-512 rows of cpu/gelu_avx512.cpp (which
// repeat these operations lane by lane, in the same order, so that both give the same bits).
// Internal to src/tensor/cpu.
//
// Every multiply-add that is fused is written as std::fma (in vector_math.h): both files are
// compiled with -ffp-contract=off (src/tensor/meson.build), and so must be any other file
// that wants these bits, since GCC otherwise fuses a multiply into a later add wherever it
// can, differently in a scalar loop and in intrinsics.
//   none:  y = x / 2 * (1 + erf(x / sqrt(2))),   dy/dx = Phi(x) + x * phi(x)
//   tanh:  y = x / 2 * (1 + tanh(u)),  u = k (x + 0.044715 x^3),  k = sqrt(2 / pi)
// 1 + erf comes from vector_math::one_plus_erf, and 1 + tanh(u), 1 - tanh(u)^2 from
// e = exp(-2|u|): no cancellation in the negative tails.
#pragma once

#include <cmath>

#include "tessera/tensor/cpu/vector_math.h"

namespace tessera::cpu {

template <class T>
struct GeluConstants {
  static constexpr T kSqrtHalf = static_cast<T>(M_SQRT1_2);                  // erf's argument scale
  static constexpr T kPdfScale = static_cast<T>(M_2_SQRTPI * M_SQRT1_2 * 0.5);  // 1 / sqrt(2 pi)
  static constexpr T kTanhScale = static_cast<T>(M_SQRT2 * M_2_SQRTPI * 0.5);   // sqrt(2 / pi)
  static constexpr T kKappa = static_cast<T>(0.044715);
  static constexpr T kThreeKappa = T(3) * kKappa;  // rounded to T, as T(3) * kKappa * x^2 rounds it
};

namespace gelu_float {

using C = GeluConstants<float>;

// 1 + tanh(u) and 1 - tanh(u)^2 from e = exp(-2|u|), exact rearrangements.
struct TanhParts {
  float one_plus_tanh, sech_squared;
};

inline TanhParts tanh_parts(float u) {
  const float e = vector_math::exp(-2.0f * std::fabs(u));
  const float d = 1.0f / (1.0f + e);
  return {vector_math::select(u >= 0.0f, 2.0f * d, 2.0f * e * d), 4.0f * e * d * d};
}

inline float tanh_inner(float x) { return C::kTanhScale * (x + C::kKappa * (x * x * x)); }

inline float gelu_tanh(float x) { return 0.5f * x * tanh_parts(tanh_inner(x)).one_plus_tanh; }

inline float gelu_tanh_backward(float dy, float x) {
  const float inner_derivative = C::kTanhScale * (1.0f + C::kThreeKappa * (x * x));
  const TanhParts parts = tanh_parts(tanh_inner(x));
  return dy * (0.5f * parts.one_plus_tanh + 0.5f * x * parts.sech_squared * inner_derivative);
}

inline float gelu_exact(float x) { return x * 0.5f * vector_math::one_plus_erf(x * C::kSqrtHalf); }

inline float gelu_exact_backward(float dy, float x) {
  const float cdf = 0.5f * vector_math::one_plus_erf(x * C::kSqrtHalf);
  const float pdf = C::kPdfScale * vector_math::exp(x * x * -0.5f);
  return dy * (cdf + x * pdf);
}

}  // namespace gelu_float
}  // namespace tessera::cpu
