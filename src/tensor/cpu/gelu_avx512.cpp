// GELU's and erf's float32 contiguous rows with AVX-512 (chosen at run time: gelu.cpp,
// isa.h), 16 lanes at a time. Each function below repeats gelu_float.h's or vector_math.h's
// operations lane by lane in the same order, with the same fmas, and this file is compiled
// with -ffp-contract=off (no other fusions), so its bits are gelu.cpp's element loop's
// (tests/tensor/test_gelu_rows.cpp compares them over a dense sweep and random bit patterns).
#include <cmath>
#include <limits>
#include <utility>

#include "tessera/tensor/cpu/avx512_intrinsics.h"
#include "tessera/tensor/cpu/avx512_kernels.h"
#include "tessera/tensor/cpu/gelu_float.h"
#include "tessera/tensor/cpu/vector_math.h"

#if TESSERA_X86_KERNELS

TESSERA_AVX512_BEGIN

namespace tessera::cpu::avx512 {

namespace {

using C = GeluConstants<float>;

// One operation per call, so that each line below reads as its scalar counterpart.
inline __m512 splat(float v) { return _mm512_set1_ps(v); }
inline __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
inline __m512 sub(__m512 a, __m512 b) { return _mm512_sub_ps(a, b); }
inline __m512 mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
inline __m512 div(__m512 a, __m512 b) { return _mm512_div_ps(a, b); }
inline __m512 fma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
inline __m512 negate(__m512 a) { return _mm512_xor_ps(a, splat(-0.0f)); }
inline __m512 absolute(__m512 a) { return _mm512_abs_ps(a); }
inline __mmask16 less(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
inline __mmask16 less_equal(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
inline __mmask16 greater(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
inline __mmask16 greater_equal(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
inline __mmask16 is_nan(__m512 a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
// condition ? if_true : if_false, per lane.
inline __m512 select(__mmask16 condition, __m512 if_true, __m512 if_false) {
  return _mm512_mask_blend_ps(condition, if_false, if_true);
}
// |magnitude| with sign's sign bit (std::copysign).
inline __m512 copy_sign(__m512 magnitude, __m512 sign) {
  return _mm512_or_ps(absolute(magnitude), _mm512_and_ps(sign, splat(-0.0f)));
}

template <size_t N, size_t... I>
inline __m512 horner(__m512 w, const float (&c)[N], std::index_sequence<I...>) {
  __m512 r = splat(c[N - 1]);
  ((r = fma(r, w, splat(c[N - 2 - I]))), ...);
  return r;
}
template <size_t N>
inline __m512 horner(__m512 w, const float (&c)[N]) {
  return horner(w, c, std::make_index_sequence<N - 1>());
}

// vector_math::power_of_two.
inline __m512 power_of_two(__m512i n) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23));
}

// vector_math::exp.
inline __m512 exp(__m512 x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;
  constexpr float kMin = -87.3365447f, kMax = 88.7228394f;
  constexpr float kRound = 12582912.0f;
  const __mmask16 below = less(x, splat(kMin)), above = greater(x, splat(kMax));
  const __m512 clamped = select(below, splat(kMin), select(above, splat(kMax), x));
  const __m512 n = sub(add(mul(clamped, splat(kLog2e)), splat(kRound)), splat(kRound));
  __m512 r = fma(n, splat(-kLn2High), clamped);
  r = fma(n, splat(-kLn2Low), r);
  __m512 p = splat(1.9875691500e-4f);
  p = fma(p, r, splat(1.3981999507e-3f));
  p = fma(p, r, splat(8.3334519073e-3f));
  p = fma(p, r, splat(4.1665795894e-2f));
  p = fma(p, r, splat(1.6666665459e-1f));
  p = fma(p, r, splat(5.0000001201e-1f));
  const __m512 y = add(fma(p, mul(r, r), r), splat(1.0f));
  const __m512i k = _mm512_cvttps_epi32(n);
  const __m512i half = _mm512_srai_epi32(_mm512_add_epi32(k, _mm512_srli_epi32(k, 31)), 1);  // k / 2, toward 0
  const __m512 result = mul(mul(y, power_of_two(half)), power_of_two(_mm512_sub_epi32(k, half)));
  return select(below, splat(0.0f),
                select(above, splat(std::numeric_limits<float>::infinity()), select(is_nan(x), x, result)));
}

// vector_math::erfc_tail.
inline __m512 erfc_tail(__m512 t_in) {
  const __m512 t = select(less(t_in, splat(10.0f)), t_in, splat(10.0f));
  const __m512 u = div(splat(1.0f), t);
  const __m512 w = mul(sub(u, splat(0.8f)), splat(1.0f / 0.7f));
  const __m512 r = horner(w, vector_math::kErfcTailCoefficients);
  const __m512 square = mul(t, t), square_low = fma(t, t, negate(square));
  return mul(mul(exp(negate(square)), sub(splat(1.0f), square_low)), mul(u, r));
}

// vector_math::erf_small_ratio.
inline __m512 erf_small_ratio(__m512 x) {
  const __m512 s = mul(x, x);
  __m512 p = splat(7.853861353153693e-5f);
  p = fma(p, s, splat(-8.010193625184903e-4f));
  p = fma(p, s, splat(5.188327685732524e-3f));
  p = fma(p, s, splat(-2.685381193529856e-2f));
  p = fma(p, s, splat(1.128358514861418e-1f));
  p = fma(p, s, splat(-3.761262582423300e-1f));
  p = fma(p, s, splat(1.128379165726710f));
  return p;
}

// vector_math::erf.
inline __m512 erf(__m512 x) {
  const __m512 one = splat(1.0f), a = absolute(x);
  const __m512 small = mul(x, erf_small_ratio(select(less(a, one), a, one)));
  const __m512 large = copy_sign(sub(one, erfc_tail(select(greater(a, one), a, one))), x);
  return select(less_equal(a, one), small, select(is_nan(x), x, large));
}

// vector_math::one_plus_erf.
inline __m512 one_plus_erf(__m512 x) {
  constexpr float kTail = 2.0f / 3.0f;
  const __m512 one = splat(1.0f), a = absolute(x);
  const __m512 tail = erfc_tail(select(greater(a, splat(kTail)), a, splat(kTail)));
  const __m512 small = add(one, mul(x, erf_small_ratio(select(less(a, one), a, one))));
  return select(less(x, splat(-kTail)), tail,
                select(less_equal(a, one), small, select(greater(x, splat(0.0f)), sub(splat(2.0f), tail), x)));
}

// gelu_float::tanh_parts.
struct TanhParts {
  __m512 one_plus_tanh, sech_squared;
};

inline TanhParts tanh_parts(__m512 u) {
  const __m512 e = exp(mul(splat(-2.0f), absolute(u)));
  const __m512 d = div(splat(1.0f), add(splat(1.0f), e));
  return {select(greater_equal(u, splat(0.0f)), mul(splat(2.0f), d), mul(mul(splat(2.0f), e), d)),
          mul(mul(mul(splat(4.0f), e), d), d)};
}

inline __m512 tanh_inner(__m512 x) {
  return mul(splat(C::kTanhScale), add(x, mul(splat(C::kKappa), mul(mul(x, x), x))));
}

inline __m512 gelu_tanh(__m512 x) { return mul(mul(splat(0.5f), x), tanh_parts(tanh_inner(x)).one_plus_tanh); }

inline __m512 gelu_tanh_backward(__m512 dy, __m512 x) {
  const __m512 inner_derivative = mul(splat(C::kTanhScale), add(splat(1.0f), mul(splat(C::kThreeKappa), mul(x, x))));
  const TanhParts parts = tanh_parts(tanh_inner(x));
  return mul(dy, add(mul(splat(0.5f), parts.one_plus_tanh),
                     mul(mul(mul(splat(0.5f), x), parts.sech_squared), inner_derivative)));
}

inline __m512 gelu_exact(__m512 x) { return mul(mul(x, splat(0.5f)), one_plus_erf(mul(x, splat(C::kSqrtHalf)))); }

inline __m512 gelu_exact_backward(__m512 dy, __m512 x) {
  const __m512 cdf = mul(splat(0.5f), one_plus_erf(mul(x, splat(C::kSqrtHalf))));
  const __m512 pdf = mul(splat(C::kPdfScale), exp(mul(mul(x, x), splat(-0.5f))));
  return mul(dy, add(cdf, mul(x, pdf)));
}

// out[i] = f(x[i]) for i < n, 16 at a time; the last partial vector through a mask.
template <__m512 (*f)(__m512)>
void unary_row(const float* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, f(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 rest = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, rest, f(_mm512_maskz_loadu_ps(rest, x + i)));
  }
}

// out[i] = f(dy[i], x[i]) for i < n.
template <__m512 (*f)(__m512, __m512)>
void binary_row(const float* dy, const float* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, f(_mm512_loadu_ps(dy + i), _mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 rest = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, rest, f(_mm512_maskz_loadu_ps(rest, dy + i), _mm512_maskz_loadu_ps(rest, x + i)));
  }
}

}  // namespace

void gelu_tanh_row(const float* x, float* out, int64_t n) { unary_row<gelu_tanh>(x, out, n); }
void gelu_exact_row(const float* x, float* out, int64_t n) { unary_row<gelu_exact>(x, out, n); }
void erf_row(const float* x, float* out, int64_t n) { unary_row<erf>(x, out, n); }
void gelu_tanh_backward_row(const float* dy, const float* x, float* out, int64_t n) {
  binary_row<gelu_tanh_backward>(dy, x, out, n);
}
void gelu_exact_backward_row(const float* dy, const float* x, float* out, int64_t n) {
  binary_row<gelu_exact_backward>(dy, x, out, n);
}

}  // namespace tessera::cpu::avx512

TESSERA_AVX512_END

#endif  // TESSERA_X86_KERNELS
