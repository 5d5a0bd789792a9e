// Element types as the CUDA kernels see them, and dispatch from DType to them.
//
// bfloat16 is carried as its 16 bits (DeviceBFloat16) and converted with the same
// rounding as the host's BFloat16 (round to nearest even, NaN kept quiet), so a value
// converted on either side has the same bits. Arithmetic on bfloat16 runs in float
// (Compute<T>), as on every GPU.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "tessera/tensor/dtype.h"

namespace tessera::cuda {

struct alignas(2) DeviceBFloat16 {
  uint16_t bits;
};

__device__ __forceinline__ float bf16_to_float(DeviceBFloat16 value) {
  return __uint_as_float(static_cast<uint32_t>(value.bits) << 16);
}

__device__ __forceinline__ DeviceBFloat16 float_to_bf16(float value) {
  uint32_t u = __float_as_uint(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<uint16_t>(u >> 16)};
}

template <class T> struct ComputeTypeOf { using type = T; };
template <> struct ComputeTypeOf<DeviceBFloat16> { using type = float; };
// The type arithmetic on T is done in: float for bfloat16, T otherwise.
template <class T> using Compute = typename ComputeTypeOf<T>::type;

template <class T> inline constexpr bool is_device_floating = std::is_floating_point_v<Compute<T>>;

// Value conversion with the host's rules (cpu/convert.h): bfloat16 goes through float.
template <class To, class From>
__device__ __forceinline__ To convert(From value) {
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else if constexpr (std::is_same_v<From, DeviceBFloat16>) {
    return convert<To>(bf16_to_float(value));
  } else if constexpr (std::is_same_v<To, DeviceBFloat16>) {
    return float_to_bf16(static_cast<float>(value));
  } else {
    return static_cast<To>(value);
  }
}

template <class T> __device__ __forceinline__ Compute<T> load(T value) { return convert<Compute<T>>(value); }
template <class T> __device__ __forceinline__ T store(Compute<T> value) { return convert<T>(value); }

// body.template operator()<T>() with T the device type of `dtype` (bool included: callers
// that do arithmetic skip it with `if constexpr`, after the host checks refused it).
template <class Body>
decltype(auto) device_dispatch_all(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::f32: return body.template operator()<float>();
    case DType::f64: return body.template operator()<double>();
    case DType::i64: return body.template operator()<int64_t>();
    case DType::u8: return body.template operator()<uint8_t>();
    case DType::bf16: return body.template operator()<DeviceBFloat16>();
    case DType::boolean: return body.template operator()<bool>();
  }
  throw DTypeError("unknown dtype");
}

// float32 and float64: what every CUDA op computes in (and the CPU checks it against).
template <class Body>
decltype(auto) device_dispatch_floating(DType dtype, std::string_view op, Body&& body) {
  switch (dtype) {
    case DType::f32: return body.template operator()<float>();
    case DType::f64: return body.template operator()<double>();
    default:
      throw DTypeError(detail::concat(op, ": expected a float32 or float64 CUDA tensor, got ", dtype_name(dtype)));
  }
}

// float32, float64 and bfloat16: the ops that are cheap in bfloat16 too.
template <class Body>
decltype(auto) device_dispatch_floating_bf16(DType dtype, std::string_view op, Body&& body) {
  switch (dtype) {
    case DType::f32: return body.template operator()<float>();
    case DType::f64: return body.template operator()<double>();
    case DType::bf16: return body.template operator()<DeviceBFloat16>();
    default:
      throw DTypeError(detail::concat(op, ": expected a floating CUDA tensor (float32, float64 or bfloat16), got ",
                                      dtype_name(dtype)));
  }
}

}  // namespace tessera::cuda
