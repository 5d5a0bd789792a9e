// GELU (exact and tanh-approximated), its derivative, and erf on the CPU.
//   none:  y = x / 2 * (1 + erf(x / sqrt(2))),   dy/dx = Phi(x) + x * phi(x)
//   tanh:  y = x / 2 * (1 + tanh(k (x + 0.044715 x^3))),  k = sqrt(2 / pi)
// float64 evaluates PyTorch's scalar formulas (aten/src/ATen/native/cpu/Activation.cpp) in
// the same order with libm (within 7e-16 of PyTorch). float32 computes gelu_float.h's
// formulas over vector_math.h's straight-line exp/erf (no libm calls), with 1 + erf and
// 1 + tanh, 1 - tanh^2 formed without cancellation, so the tails keep their digits where
// PyTorch's float kernel rounds them away; elsewhere the two agree to a few ulps.
//
// float32 contiguous rows run 16 lanes at a time with AVX-512 where the CPU has it
// (gelu_avx512.cpp, chosen at run time: isa.h), with the element loop's bits: both files
// are compiled with -ffp-contract=off, so each does exactly the fmas written. The element
// loop is what the compiler makes of the element formulas: with the default x86-64-v3
// baseline, 8 AVX2 lanes (their selects are bitwise, vector_math::select).
// Strided inputs are read in place (cpu/loops.h); outputs are contiguous.
#include <cmath>
#include <type_traits>

#include "tessera/tensor/cpu/avx512_kernels.h"
#include "tessera/tensor/cpu/gelu_float.h"
#include "tessera/tensor/cpu/kernels.h"
#include "tessera/tensor/cpu/loops.h"
#include "tessera/tensor/cpu/vector_math.h"
#include "tessera/tensor/layer_kernel_shapes.h"

namespace tessera::cpu {

using namespace native;

namespace {

// The element formulas, overloaded by dtype: float32's from gelu_float.h (the AVX-512 rows
// compute the same), float64's PyTorch's scalar formulas in its order.
using gelu_float::gelu_exact;
using gelu_float::gelu_exact_backward;
using gelu_float::gelu_tanh;
using gelu_float::gelu_tanh_backward;
using Float64 = GeluConstants<double>;

double gelu_exact(double x) { return x * 0.5 * (1.0 + std::erf(x * Float64::kSqrtHalf)); }

double gelu_tanh(double x) {
  const double cube = x * x * x;
  const double inner = Float64::kTanhScale * (x + Float64::kKappa * cube);
  return 0.5 * x * (1.0 + std::tanh(inner));
}

double gelu_exact_backward(double dy, double x) {
  const double cdf = 0.5 * (1.0 + std::erf(x * Float64::kSqrtHalf));
  const double pdf = Float64::kPdfScale * std::exp(x * x * -0.5);
  return dy * (cdf + x * pdf);
}

double gelu_tanh_backward(double dy, double x) {
  const double square = x * x;
  const double cube = square * x;
  const double inner = Float64::kTanhScale * (x + Float64::kKappa * cube);
  const double inner_derivative = Float64::kTanhScale * (1.0 + 3.0 * Float64::kKappa * square);
  const double tanh_inner = std::tanh(inner);
  const double left = 0.5 * x;
  const double right = 1.0 + tanh_inner;
  const double left_derivative = 0.5 * right;
  const double tanh_derivative = 1.0 - tanh_inner * tanh_inner;
  const double right_derivative = left * tanh_derivative * inner_derivative;
  return dy * (left_derivative + right_derivative);
}

float erf_of(float x) { return vector_math::erf(x); }
double erf_of(double x) { return std::erf(x); }

// A kernel over one contiguous row (the AVX-512 ones); null: the element loop runs there too.
template <class T>
using UnaryRow = void (*)(const T* x, T* out, int64_t n);
template <class T>
using BinaryRow = void (*)(const T* dy, const T* x, T* out, int64_t n);

// out = f(x) over x's shape, x read through its strides.
template <class T, class F>
Tensor map_floating(const Tensor& input, F f, UnaryRow<T> contiguous_row) {
  Tensor out = empty(input.sizes(), input.dtype(), input.device());
  auto it = cpu::make_iteration<2>(out.sizes(), {&out, &input});
  T* po = input.numel() > 0 ? out.data_ptr<T>() : nullptr;
  const T* pi = input.numel() > 0 ? static_cast<const T*>(input.data_ptr()) : nullptr;
  cpu::for_each_row(it, [&](const std::array<int64_t, 2>& offsets, int64_t n, const std::array<int64_t, 2>& st) {
    T* o = po + offsets[0];
    const T* x = pi + offsets[1];
    if (st[1] == 1 && contiguous_row != nullptr) {
      contiguous_row(x, o, n);
    } else if (st[1] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i * st[1]]);
    }
  });
  return out;
}

// out = f(dy, x) over x's shape.
template <class T, class F>
Tensor zip_floating(const Tensor& grad, const Tensor& input, F f, BinaryRow<T> contiguous_row) {
  Tensor out = empty(input.sizes(), input.dtype(), input.device());
  auto it = cpu::make_iteration<3>(out.sizes(), {&out, &grad, &input});
  T* po = input.numel() > 0 ? out.data_ptr<T>() : nullptr;
  const T* pg = input.numel() > 0 ? static_cast<const T*>(grad.data_ptr()) : nullptr;
  const T* pi = input.numel() > 0 ? static_cast<const T*>(input.data_ptr()) : nullptr;
  cpu::for_each_row(it, [&](const std::array<int64_t, 3>& offsets, int64_t n, const std::array<int64_t, 3>& st) {
    T* o = po + offsets[0];
    const T* g = pg + offsets[1];
    const T* x = pi + offsets[2];
    if (st[1] == 1 && st[2] == 1 && contiguous_row != nullptr) {
      contiguous_row(g, x, o, n);
    } else if (st[1] == 1 && st[2] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(g[i], x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] = f(g[i * st[1]], x[i * st[2]]);
    }
  });
  return out;
}

// The contiguous-row kernels: AVX-512 for float32 where it may run (isa.h), none otherwise.
// Chosen outside the OpenMP region: the choice may throw.
template <class T>
struct ContiguousRows {
  UnaryRow<T> gelu_tanh = nullptr, gelu_exact = nullptr, erf = nullptr;
  BinaryRow<T> gelu_tanh_backward = nullptr, gelu_exact_backward = nullptr;
};

template <class T>
ContiguousRows<T> contiguous_rows() {
#if TESSERA_X86_KERNELS
  if constexpr (std::is_same_v<T, float>) {
    if (use_avx512()) {
      return {avx512::gelu_tanh_row, avx512::gelu_exact_row, avx512::erf_row, avx512::gelu_tanh_backward_row,
              avx512::gelu_exact_backward_row};
    }
  }
#endif
  return {};
}

}  // namespace

Tensor gelu(const Tensor& input, GeluApproximate approximate) {
  check_floating_unary(input, "gelu");
  check_cpu(input, "gelu");
  return dispatch_floating(input.dtype(), "gelu", [&]<class T>() {
    const ContiguousRows<T> rows = contiguous_rows<T>();
    return approximate == GeluApproximate::tanh
               ? map_floating<T>(input, [](T x) { return gelu_tanh(x); }, rows.gelu_tanh)
               : map_floating<T>(input, [](T x) { return gelu_exact(x); }, rows.gelu_exact);
  });
}

Tensor gelu_backward(const Tensor& grad_output, const Tensor& input, GeluApproximate approximate) {
  check_gelu_backward_operands(grad_output, input);
  check_cpu(input, "gelu_backward");
  return dispatch_floating(input.dtype(), "gelu_backward", [&]<class T>() {
    const ContiguousRows<T> rows = contiguous_rows<T>();
    return approximate == GeluApproximate::tanh
               ? zip_floating<T>(grad_output, input, [](T dy, T x) { return gelu_tanh_backward(dy, x); },
                                 rows.gelu_tanh_backward)
               : zip_floating<T>(grad_output, input, [](T dy, T x) { return gelu_exact_backward(dy, x); },
                                 rows.gelu_exact_backward);
  });
}

Tensor erf(const Tensor& input) {
  check_floating_unary(input, "erf");
  check_cpu(input, "erf");
  return dispatch_floating(input.dtype(), "erf", [&]<class T>() {
    return map_floating<T>(input, [](T x) { return erf_of(x); }, contiguous_rows<T>().erf);
  });
}

}  // namespace tessera::cpu
