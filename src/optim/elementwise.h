// The loop every optimizer update runs: one pass over a parameter's elements, each
// element's arithmetic independent of the others, split across OpenMP threads for large
// tensors. Because elements never interact, the result is the same on any thread count.
//
// Rounding follows PyTorch's CPU kernels (1.13, AVX2 build), which the golden tests pin
// down: `x.add_(y, alpha=a)` computes fma(y, a, x) (ufunc add uses vec::fmadd), and
// `x.addcmul_(y, z, value=v)` computes fma(v * y, z, x) (GCC contracts the multiply-add);
// `x.addcdiv_(y, z, value=v)` is x + (v * y) / z; mul, div, sqrt round once each. A
// Python float scalar is cast to the tensor's dtype before use (Scalar::to<scalar_t>).
#pragma once

#include <cmath>
#include <cstdint>

#include "tessera/tensor/cpu/loops.h"

namespace tessera::optim::detail {

// Calls body(i) for i in [0, n); on several threads when n is large.
template <class Body>
void for_each_element(int64_t n, Body body) {
#pragma omp parallel for schedule(static) if (n >= cpu::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) body(i);
}

// x + alpha * y with one rounding: PyTorch's add(x, y, alpha).
template <class T>
inline T add_scaled(T x, T y, T alpha) {
  return std::fma(y, alpha, x);
}

// x + value * y * z: PyTorch's addcmul(x, y, z, value).
template <class T>
inline T addcmul(T x, T y, T z, T value) {
  return std::fma(value * y, z, x);
}

// x + value * y / z: PyTorch's addcdiv(x, y, z, value).
template <class T>
inline T addcdiv(T x, T y, T z, T value) {
  return x + value * y / z;
}

// torch.maximum: NaN wins.
template <class T>
inline T maximum(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return a + b;
  return a > b ? a : b;
}

}  // namespace tessera::optim::detail
