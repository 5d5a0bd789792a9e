// GELU (exact and tanh), its derivative and erf on CUDA: the CPU's formulas (cpu/gelu.cpp)
// with the device's erf, exp and tanh, in Compute<T> (float for bfloat16). Strided and
// vectorised walks come from elementwise.cuh.
#include <cmath>

#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/elementwise.cuh"
#include "tessera/tensor/cuda/kernels.h"
#include "tessera/tensor/layer_kernel_shapes.h"

namespace tessera::cuda {

using namespace native;

namespace {

__device__ __forceinline__ float math_erf(float x) { return ::erff(x); }
__device__ __forceinline__ double math_erf(double x) { return ::erf(x); }
__device__ __forceinline__ float math_exp(float x) { return ::expf(x); }
__device__ __forceinline__ double math_exp(double x) { return ::exp(x); }
__device__ __forceinline__ float math_tanh(float x) { return ::tanhf(x); }
__device__ __forceinline__ double math_tanh(double x) { return ::tanh(x); }

template <class C>
struct GeluConstants {
  static constexpr C kSqrtHalf = static_cast<C>(M_SQRT1_2);
  static constexpr C kPdfScale = static_cast<C>(M_2_SQRTPI * M_SQRT1_2 * 0.5);
  static constexpr C kTanhScale = static_cast<C>(M_SQRT2 * M_2_SQRTPI * 0.5);
  static constexpr C kKappa = static_cast<C>(0.044715);
};

template <class T>
struct GeluForward {
  bool tanh_approximation;
  __device__ T operator()(T value) const {
    using C = Compute<T>;
    using K = GeluConstants<C>;
    const C x = load(value);
    if (tanh_approximation) {
      const C inner = K::kTanhScale * (x + K::kKappa * (x * x * x));
      return store<T>(C(0.5) * x * (C(1) + math_tanh(inner)));
    }
    return store<T>(x * C(0.5) * (C(1) + math_erf(x * K::kSqrtHalf)));
  }
};

template <class T>
struct GeluBackward {
  bool tanh_approximation;
  __device__ T operator()(T grad, T value) const {
    using C = Compute<T>;
    using K = GeluConstants<C>;
    const C dy = load(grad), x = load(value);
    if (tanh_approximation) {
      const C square = x * x;
      const C inner = K::kTanhScale * (x + K::kKappa * (square * x));
      const C t = math_tanh(inner);
      const C left_derivative = C(0.5) * (C(1) + t);
      const C right_derivative = C(0.5) * x * (C(1) - t * t) * (K::kTanhScale * (C(1) + C(3) * K::kKappa * square));
      return store<T>(dy * (left_derivative + right_derivative));
    }
    const C cdf = C(0.5) * (C(1) + math_erf(x * K::kSqrtHalf));
    const C pdf = K::kPdfScale * math_exp(x * x * C(-0.5));
    return store<T>(dy * (cdf + x * pdf));
  }
};

template <class T>
struct Erf {
  __device__ T operator()(T value) const { return store<T>(math_erf(load(value))); }
};

}  // namespace

Tensor gelu(const Tensor& input, GeluApproximate approximate) {
  check_floating_unary(input, "gelu");
  DeviceGuard guard = enter_cuda_device(input, "gelu");
  Tensor out = empty(input.sizes(), input.dtype(), input.device());
  device_dispatch_floating_bf16(input.dtype(), "gelu", [&]<class T>() {
    map_into<T, T>(out, input, GeluForward<T>{approximate == GeluApproximate::tanh});
  });
  return out;
}

Tensor gelu_backward(const Tensor& grad_output, const Tensor& input, GeluApproximate approximate) {
  check_gelu_backward_operands(grad_output, input);
  DeviceGuard guard = enter_cuda_device(input, "gelu_backward");
  Tensor out = empty(input.sizes(), input.dtype(), input.device());
  device_dispatch_floating_bf16(input.dtype(), "gelu_backward", [&]<class T>() {
    zip_into<T, T, T>(out, grad_output, input, GeluBackward<T>{approximate == GeluApproximate::tanh});
  });
  return out;
}

Tensor erf(const Tensor& input) {
  check_floating_unary(input, "erf");
  DeviceGuard guard = enter_cuda_device(input, "erf");
  Tensor out = empty(input.sizes(), input.dtype(), input.device());
  device_dispatch_floating_bf16(input.dtype(), "erf", [&]<class T>() { map_into<T, T>(out, input, Erf<T>{}); });
  return out;
}

}  // namespace tessera::cuda
