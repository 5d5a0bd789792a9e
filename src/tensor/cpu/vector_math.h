// float exp and erf for GELU's and erf's element loops: libm's expf/erff/tanhf are calls
// no loop over them can vectorise. Every function here is straight-line float arithmetic
// (bitwise selects, no branches, no tables), so that a compiler may vectorise a loop over
// them (GCC 12 does for the x86-64-v3 baseline: 8 AVX2 lanes), and cpu/gelu_avx512.cpp's
// rows repeat them lane by lane. The fused multiply-adds are the std::fma calls; compiled
// with -ffp-contract=off (as gelu.cpp and gelu_avx512.cpp are) nothing else is fused, which
// is what makes those rows give the same bits.
//
// Accuracy over float inputs, against a float64 reference (tests/tensor/test_vector_math.cpp):
// exp within 1 ulp (it flushes results below the smallest normal float, 1.2e-38, to 0),
// erf within 2.5 ulp, and one_plus_erf(x) = 1 + erf(x) = erfc(-x) within 5 ulp relative to
// itself, deep into x << 0, where 1 + erf(x) would cancel. (GELU's tanh form builds
// 1 + tanh(u) and 1 - tanh(u)^2 from e = exp(-2|u|) the same way: cpu/gelu.cpp.)
// PyTorch's float GELU loses those tails to cancellation (its tanh form's derivative is 0
// below x = -5); these do not.
//
// Constructions: exp by range reduction x = n ln2 + r (ln2 in two parts, Cody-Waite) and
// Cephes's degree-5 polynomial for exp(r) on |r| <= ln2 / 2, the power of two built from
// its bits in two halves (so n = -126 and n = 128 stay in range); erf by a degree-6
// polynomial in x^2 for |x| <= 1 (Cephes's coefficients) and, above, erfc(t) = exp(-t^2) *
// R(1/t) / t with R a degree-13 polynomial fitted (minimax, relative 2e-8) on t in
// [2/3, 10] by tools/fit_erfc_tail.py, t^2 split exactly into hi + lo so that exp(-t^2)
// keeps its digits.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

namespace tessera::cpu::vector_math {

// c[0] + w (c[1] + w (c[2] + ...)) by fused multiply-adds, unrolled at compile time: a
// loop here would leave the caller's element loop with control flow, unvectorised.
template <size_t N, size_t... I>
inline float horner(float w, const float (&c)[N], std::index_sequence<I...>) {
  float r = c[N - 1];
  ((r = std::fma(r, w, c[N - 2 - I])), ...);
  return r;
}
template <size_t N>
inline float horner(float w, const float (&c)[N]) {
  return horner(w, c, std::make_index_sequence<N - 1>());
}

// condition ? if_true : if_false by masks, not a branch. GCC (12, -ftrapping-math, the
// default) leaves a ?: over float arithmetic a branch, which keeps the element loops
// scalar at the x86-64-v3 baseline ("control flow in loop"); this it vectorises. The value
// is exactly one of the two, so the bits are the ?:'s.
inline float select(bool condition, float if_true, float if_false) {
  const uint32_t mask = uint32_t{0} - static_cast<uint32_t>(condition);
  return std::bit_cast<float>((std::bit_cast<uint32_t>(if_true) & mask) | (std::bit_cast<uint32_t>(if_false) & ~mask));
}

// 2^n for n in [-126, 127], from the exponent bits.
inline float power_of_two(int32_t n) { return std::bit_cast<float>(static_cast<uint32_t>(n + 127) << 23); }

// e^x; 0 below the smallest normal's logarithm, infinity above the largest float's.
inline float exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;
  constexpr float kMin = -87.3365447f, kMax = 88.7228394f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float clamped = select(x < kMin, kMin, select(x > kMax, kMax, x));
  const float n = (clamped * kLog2e + kRound) - kRound;
  float r = std::fma(n, -kLn2High, clamped);
  r = std::fma(n, -kLn2Low, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  const float y = std::fma(p, r * r, r) + 1.0f;
  const int32_t k = static_cast<int32_t>(n), half = k / 2;
  const float result = y * power_of_two(half) * power_of_two(k - half);
  return select(x < kMin, 0.0f, select(x > kMax, std::numeric_limits<float>::infinity(), select(x == x, result, x)));
}

// erfc_tail's R(w): minimax fit (tools/fit_erfc_tail.py), constant term first.
inline constexpr float kErfcTailCoefficients[] = {0.45977863524460666f,    -0.11680761191508991f,   0.012094333516401542f,
                                                 0.010664737726645777f,   -0.010031571445987137f,  0.005454284663139325f,
                                                 -0.0019446138283543087f, 0.00022889888314619276f, 6.744692133082584e-05f,
                                                 -0.00020080947364284644f, 0.0006112846611130111f, -0.0004053189611628287f,
                                                 -0.00010907127697777374f, 0.00012232230857707712f};

// erfc(t) for t >= 2/3 (0 once exp(-t^2) underflows, from t = 9.35).
inline float erfc_tail(float t_in) {
  const float t = select(t_in < 10.0f, t_in, 10.0f);  // keeps t^2's split finite for t = inf
  const float u = 1.0f / t;
  const float w = (u - 0.8f) * (1.0f / 0.7f);  // u in [0.1, 1.5] mapped to [-1, 1]
  const float r = horner(w, kErfcTailCoefficients);
  const float square = t * t, square_low = std::fma(t, t, -square);  // t^2 = square + square_low exactly
  return exp(-square) * (1.0f - square_low) * (u * r);
}

// erf(x) / x for |x| <= 1, as a polynomial in x^2.
inline float erf_small_ratio(float x) {
  const float s = x * x;
  float p = 7.853861353153693e-5f;
  p = std::fma(p, s, -8.010193625184903e-4f);
  p = std::fma(p, s, 5.188327685732524e-3f);
  p = std::fma(p, s, -2.685381193529856e-2f);
  p = std::fma(p, s, 1.128358514861418e-1f);
  p = std::fma(p, s, -3.761262582423300e-1f);
  p = std::fma(p, s, 1.128379165726710f);
  return p;
}

inline float erf(float x) {
  const float a = std::fabs(x);
  const float small = x * erf_small_ratio(select(a < 1.0f, a, 1.0f));
  const float large = std::copysign(1.0f - erfc_tail(select(a > 1.0f, a, 1.0f)), x);
  return select(a <= 1.0f, small, select(x == x, large, x));
}

// 1 + erf(x), without cancellation for x < -2/3 (where it is erfc(-x)).
inline float one_plus_erf(float x) {
  constexpr float kTail = 2.0f / 3.0f;
  const float a = std::fabs(x);
  const float tail = erfc_tail(select(a > kTail, a, kTail));
  const float small = 1.0f + x * erf_small_ratio(select(a < 1.0f, a, 1.0f));
  return select(x < -kTail, tail, select(a <= 1.0f, small, select(x > 0.0f, 2.0f - tail, x)));
}

}  // namespace tessera::cpu::vector_math
