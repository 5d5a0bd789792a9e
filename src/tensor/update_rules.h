// The per-element arithmetic of every optimizer update, written once for the CPU loops
// (cpu/optimizer_updates.cpp) and the CUDA kernels (cuda/optimizer_updates.cu), so that
// both devices evaluate the same expressions in the same order and round the same way.
// The optimizers (src/optim/) fill the scalars and call native::*_update
// (optimizer_updates.h), which picks the backend. Internal, not installed.
//
// Rounding follows PyTorch's CPU kernels (1.13, AVX2 build), which the golden tests pin
// down: `x.add_(y, alpha=a)` computes fma(y, a, x) (ufunc add uses vec::fmadd), and
// `x.addcmul_(y, z, value=v)` computes fma(v * y, z, x) (GCC contracts the multiply-add);
// `x.addcdiv_(y, z, value=v)` is x + (v * y) / z; mul, div, sqrt round once each. A
// Python float scalar is cast to the tensor's dtype before use (Scalar::to<scalar_t>), so
// the scalars below are already of the element type. Nothing else may be fused: the CPU
// loops are compiled with -ffp-contract=off and the CUDA kernels with -fmad=false, and the
// device uses the correctly rounded intrinsics for fma, division and square root.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TS_UPDATE_HOST_DEVICE __host__ __device__
#else
#define TS_UPDATE_HOST_DEVICE
#endif

namespace tessera::update_rules {

// x * y + z with one rounding.
template <class T>
TS_UPDATE_HOST_DEVICE inline T fused_multiply_add(T x, T y, T z) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == sizeof(float)) {
    return __fmaf_rn(x, y, z);
  } else {
    return __fma_rn(x, y, z);
  }
#else
  return std::fma(x, y, z);
#endif
}

template <class T>
TS_UPDATE_HOST_DEVICE inline T divide(T x, T y) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == sizeof(float)) {
    return __fdiv_rn(x, y);
  } else {
    return __ddiv_rn(x, y);
  }
#else
  return x / y;
#endif
}

template <class T>
TS_UPDATE_HOST_DEVICE inline T square_root(T x) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == sizeof(float)) {
    return __fsqrt_rn(x);
  } else {
    return __dsqrt_rn(x);
  }
#else
  return std::sqrt(x);
#endif
}

// x + alpha * y with one rounding: PyTorch's add(x, y, alpha).
template <class T>
TS_UPDATE_HOST_DEVICE inline T add_scaled(T x, T y, T alpha) {
  return fused_multiply_add(y, alpha, x);
}

// x + value * y * z: PyTorch's addcmul(x, y, z, value).
template <class T>
TS_UPDATE_HOST_DEVICE inline T addcmul(T x, T y, T z, T value) {
  return fused_multiply_add(value * y, z, x);
}

// x + value * y / z: PyTorch's addcdiv(x, y, z, value).
template <class T>
TS_UPDATE_HOST_DEVICE inline T addcdiv(T x, T y, T z, T value) {
  return x + divide(value * y, z);
}

// torch.maximum: NaN wins.
template <class T>
TS_UPDATE_HOST_DEVICE inline T maximum(T a, T b) {
  if (a != a || b != b) return a + b;  // a NaN (x != x only for NaN)
  return a > b ? a : b;
}

// SGD (torch 1.13's _single_tensor_sgd). `buffer` is null without momentum.
template <class T>
struct SgdScalars {
  T weight_decay, momentum, one_minus_dampening, negative_lr;
  bool decay, use_momentum, nesterov, maximize, first_step;
};

template <class T>
TS_UPDATE_HOST_DEVICE inline void sgd_element(T& param, T grad, T* buffer, const SgdScalars<T>& s) {
  T d = s.maximize ? -grad : grad;
  if (s.decay) d = add_scaled(d, param, s.weight_decay);
  if (s.use_momentum) {
    const T b = s.first_step ? d : add_scaled(*buffer * s.momentum, d, s.one_minus_dampening);
    *buffer = b;
    d = s.nesterov ? add_scaled(d, b, s.momentum) : b;
  }
  param = add_scaled(param, d, s.negative_lr);
}

// Adam and AdamW (torch 1.13's _single_tensor_adam/_adamw, non-capturable): the bias
// corrections and step size are computed on the host in double, then cast.
// `max_exp_avg_sq` is null without amsgrad.
template <class T>
struct AdamScalars {
  T beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay;
  T decay_factor;           // AdamW: 1 - lr * weight_decay
  T bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  T negative_step_size;     // -lr / (1 - beta1^t)
  bool coupled_decay, decoupled_decay, amsgrad, maximize;
};

template <class T>
TS_UPDATE_HOST_DEVICE inline void adam_element(T& param, T grad, T& exp_avg, T& exp_avg_sq, T* max_exp_avg_sq,
                                              const AdamScalars<T>& s) {
  T g = s.maximize ? -grad : grad;
  T p = param;
  if (s.coupled_decay) g = add_scaled(g, p, s.weight_decay);
  if (s.decoupled_decay) p = p * s.decay_factor;
  const T m = add_scaled(exp_avg * s.beta1, g, s.one_minus_beta1);
  const T v = addcmul(exp_avg_sq * s.beta2, g, g, s.one_minus_beta2);
  exp_avg = m;
  exp_avg_sq = v;
  T second_moment = v;
  if (s.amsgrad) {
    second_moment = maximum(*max_exp_avg_sq, v);
    *max_exp_avg_sq = second_moment;
  }
  const T denom = divide(square_root(second_moment), s.bias_correction2_sqrt) + s.eps;
  param = addcdiv(p, m, denom, s.negative_step_size);
}

// Adadelta (torch 1.13's _single_tensor_adadelta).
template <class T>
struct AdadeltaScalars {
  T rho, one_minus_rho, eps, weight_decay, negative_lr;
  bool decay, maximize;
};

template <class T>
TS_UPDATE_HOST_DEVICE inline void adadelta_element(T& param, T grad, T& square_avg, T& acc_delta,
                                                  const AdadeltaScalars<T>& s) {
  T g = s.maximize ? -grad : grad;
  if (s.decay) g = add_scaled(g, param, s.weight_decay);
  const T v = addcmul(square_avg * s.rho, g, g, s.one_minus_rho);
  square_avg = v;
  const T std_dev = square_root(v + s.eps);
  const T delta = divide(square_root(acc_delta + s.eps), std_dev) * g;
  acc_delta = addcmul(acc_delta * s.rho, delta, delta, s.one_minus_rho);
  param = add_scaled(param, delta, s.negative_lr);
}

}  // namespace tessera::update_rules
