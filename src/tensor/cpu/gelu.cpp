// GELU (exact and tanh-approximated), its derivative, and erf on the CPU.
//   none:  y = x / 2 * (1 + erf(x / sqrt(2))),   dy/dx = Phi(x) + x * phi(x)
//   tanh:  y = x / 2 * (1 + tanh(k (x + 0.044715 x^3))),  k = sqrt(2 / pi)
// float64 evaluates PyTorch's scalar formulas (aten/src/ATen/native/cpu/Activation.cpp) in
// the same order with libm (within 4e-16 of PyTorch). float32 uses vector_math.h, whose
// straight-line exp/erf/tanh let the loops vectorise (libm's calls do not), and computes
// 1 + erf and 1 + tanh, 1 - tanh^2 without cancellation, so the tails keep their digits
// where PyTorch's float kernel rounds them away; elsewhere the two agree to a few ulps.
// Strided inputs are read in place (cpu/loops.h); outputs are contiguous.
#include <cmath>
#include <type_traits>

#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/cpu/vector_math.h"
#include "tessera/tensor/layer_kernel_shapes.h"

namespace tessera::cpu {

using namespace native;

namespace {

template <class T>
struct GeluConstants {
  static constexpr T kSqrtHalf = static_cast<T>(M_SQRT1_2);                  // erf's argument scale
  static constexpr T kPdfScale = static_cast<T>(M_2_SQRTPI * M_SQRT1_2 * 0.5);  // 1 / sqrt(2 pi)
  static constexpr T kTanhScale = static_cast<T>(M_SQRT2 * M_2_SQRTPI * 0.5);   // sqrt(2 / pi)
  static constexpr T kKappa = static_cast<T>(0.044715);
};

// 1 + tanh(u) and 1 - tanh(u)^2 from e = exp(-2|u|), exact rearrangements.
struct TanhParts {
  float one_plus_tanh, sech_squared;
};

inline TanhParts tanh_parts(float u) {
  const float e = vector_math::exp(-2.0f * std::fabs(u));
  const float d = 1.0f / (1.0f + e);
  return {u >= 0.0f ? 2.0f * d : 2.0f * e * d, 4.0f * e * d * d};
}

template <class T>
T gelu_exact(T x) {
  using C = GeluConstants<T>;
  if constexpr (std::is_same_v<T, float>) {
    return x * 0.5f * vector_math::one_plus_erf(x * C::kSqrtHalf);
  } else {
    return x * T(0.5) * (T(1) + std::erf(x * C::kSqrtHalf));
  }
}

template <class T>
T gelu_tanh(T x) {
  using C = GeluConstants<T>;
  const T cube = x * x * x;
  const T inner = C::kTanhScale * (x + C::kKappa * cube);
  if constexpr (std::is_same_v<T, float>) {
    return 0.5f * x * tanh_parts(inner).one_plus_tanh;
  } else {
    return T(0.5) * x * (T(1) + std::tanh(inner));
  }
}

template <class T>
T gelu_exact_backward(T dy, T x) {
  using C = GeluConstants<T>;
  if constexpr (std::is_same_v<T, float>) {
    const float cdf = 0.5f * vector_math::one_plus_erf(x * C::kSqrtHalf);
    const float pdf = C::kPdfScale * vector_math::exp(x * x * -0.5f);
    return dy * (cdf + x * pdf);
  } else {
    const T cdf = T(0.5) * (T(1) + std::erf(x * C::kSqrtHalf));
    const T pdf = C::kPdfScale * std::exp(x * x * T(-0.5));
    return dy * (cdf + x * pdf);
  }
}

template <class T>
T gelu_tanh_backward(T dy, T x) {
  using C = GeluConstants<T>;
  const T square = x * x;
  const T cube = square * x;
  const T inner = C::kTanhScale * (x + C::kKappa * cube);
  const T inner_derivative = C::kTanhScale * (T(1) + T(3) * C::kKappa * square);
  if constexpr (std::is_same_v<T, float>) {
    const TanhParts parts = tanh_parts(inner);
    return dy * (0.5f * parts.one_plus_tanh + 0.5f * x * parts.sech_squared * inner_derivative);
  } else {
    const T tanh_inner = std::tanh(inner);
    const T left = T(0.5) * x;
    const T right = T(1) + tanh_inner;
    const T left_derivative = T(0.5) * right;
    const T tanh_derivative = T(1) - tanh_inner * tanh_inner;
    const T right_derivative = left * tanh_derivative * inner_derivative;
    return dy * (left_derivative + right_derivative);
  }
}

template <class T>
T erf_of(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return vector_math::erf(x);
  } else {
    return std::erf(x);
  }
}

// out = f(x) over x's shape, x read through its strides.
template <class T, class F>
Tensor map_floating(const Tensor& input, F f) {
  Tensor out = empty(input.sizes(), input.dtype(), input.device());
  auto it = cpu::make_iteration<2>(out.sizes(), {&out, &input});
  T* po = input.numel() > 0 ? out.data_ptr<T>() : nullptr;
  const T* pi = input.numel() > 0 ? static_cast<const T*>(input.data_ptr()) : nullptr;
  cpu::for_each_row(it, [&](const std::array<int64_t, 2>& offsets, int64_t n, const std::array<int64_t, 2>& st) {
    T* o = po + offsets[0];
    const T* x = pi + offsets[1];
    if (st[1] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i * st[1]]);
    }
  });
  return out;
}

// out = f(dy, x) over x's shape.
template <class T, class F>
Tensor zip_floating(const Tensor& grad, const Tensor& input, F f) {
  Tensor out = empty(input.sizes(), input.dtype(), input.device());
  auto it = cpu::make_iteration<3>(out.sizes(), {&out, &grad, &input});
  T* po = input.numel() > 0 ? out.data_ptr<T>() : nullptr;
  const T* pg = input.numel() > 0 ? static_cast<const T*>(grad.data_ptr()) : nullptr;
  const T* pi = input.numel() > 0 ? static_cast<const T*>(input.data_ptr()) : nullptr;
  cpu::for_each_row(it, [&](const std::array<int64_t, 3>& offsets, int64_t n, const std::array<int64_t, 3>& st) {
    T* o = po + offsets[0];
    const T* g = pg + offsets[1];
    const T* x = pi + offsets[2];
    if (st[1] == 1 && st[2] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(g[i], x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] = f(g[i * st[1]], x[i * st[2]]);
    }
  });
  return out;
}

}  // namespace

Tensor gelu(const Tensor& input, GeluApproximate approximate) {
  check_floating_unary(input, "gelu");
  check_cpu(input, "gelu");
  return dispatch_floating(input.dtype(), "gelu", [&]<class T>() {
    return approximate == GeluApproximate::tanh ? map_floating<T>(input, [](T x) { return gelu_tanh(x); })
                                                : map_floating<T>(input, [](T x) { return gelu_exact(x); });
  });
}

Tensor gelu_backward(const Tensor& grad_output, const Tensor& input, GeluApproximate approximate) {
  check_gelu_backward_operands(grad_output, input);
  check_cpu(input, "gelu_backward");
  return dispatch_floating(input.dtype(), "gelu_backward", [&]<class T>() {
    return approximate == GeluApproximate::tanh
               ? zip_floating<T>(grad_output, input, [](T dy, T x) { return gelu_tanh_backward(dy, x); })
               : zip_floating<T>(grad_output, input, [](T dy, T x) { return gelu_exact_backward(dy, x); });
  });
}

Tensor erf(const Tensor& input) {
  check_floating_unary(input, "erf");
  check_cpu(input, "erf");
  return dispatch_floating(input.dtype(), "erf",
                           [&]<class T>() { return map_floating<T>(input, [](T x) { return erf_of(x); }); });
}

}  // namespace tessera::cpu
