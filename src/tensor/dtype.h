// Element types. f64 exists for gradient checks, bf16 for mixed precision (CUDA; on the
// CPU matmul, linear and conv2d so far), i64 for labels and indices, u8 for raw images,
// boolean ("bool", one byte holding 0 or 1) for comparison results and masks, as
// torch.bool.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>

#include "tessera/tensor/error.h"

namespace tessera {

// New dtypes go at the end: the numbers are part of collective fingerprints.
enum class DType : uint8_t { f32, f64, i64, u8, bf16, boolean };

// bfloat16: the upper half of an IEEE float; conversion rounds to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float value) {
    uint32_t u;
    std::memcpy(&u, &value, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a quiet NaN
      bits = static_cast<uint16_t>((u >> 16) | 0x40u);
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);
      bits = static_cast<uint16_t>(u >> 16);
    }
  }
  explicit operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &u, sizeof value);
    return value;
  }
};

constexpr size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::bf16: return 2;
    case DType::boolean: return 1;
  }
  return 0;
}

// PyTorch's names, as printed in messages and written to safetensors headers elsewhere.
constexpr std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
    case DType::bf16: return "bfloat16";
    case DType::boolean: return "bool";
  }
  return "unknown";
}

constexpr bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::bf16;
}

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::f64; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::i64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::bf16; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::boolean; };
static_assert(sizeof(bool) == 1, "DType::boolean stores C++ bool, one byte per element");
template <class T> constexpr DType dtype_of = DTypeOf<T>::value;

inline std::ostream& operator<<(std::ostream& out, DType dtype) { return out << dtype_name(dtype); }

// Calls body.template operator()<T>() with T the C++ type of `dtype`, restricted to the
// floating types the CPU computes in (f32, f64). `op` names the caller in the error.
template <class Body>
decltype(auto) dispatch_floating(DType dtype, std::string_view op, Body&& body) {
  switch (dtype) {
    case DType::f32: return body.template operator()<float>();
    case DType::f64: return body.template operator()<double>();
    default:
      throw DTypeError(detail::concat(op, ": expected a floating tensor (float32 or float64), got ",
                                      dtype_name(dtype)));
  }
}

// Like dispatch_floating, over every dtype with arithmetic (f32, f64, i64, u8), for a
// kernel on `backend` ("the CPU", "CUDA"), which the error names. bool has no arithmetic
// (as in PyTorch, `-mask` and `mask - mask` are errors): the ops that take it use
// dispatch_numeric_or_bool or dispatch_all.
template <class Body>
decltype(auto) dispatch_numeric_on(std::string_view backend, DType dtype, std::string_view op, Body&& body) {
  switch (dtype) {
    case DType::f32: return body.template operator()<float>();
    case DType::f64: return body.template operator()<double>();
    case DType::i64: return body.template operator()<int64_t>();
    case DType::u8: return body.template operator()<uint8_t>();
    default:
      throw DTypeError(detail::concat(op, ": not implemented for ", dtype_name(dtype), " on ", backend));
  }
}

// dispatch_numeric_on for the CPU kernels.
template <class Body>
decltype(auto) dispatch_numeric(DType dtype, std::string_view op, Body&& body) {
  return dispatch_numeric_on("the CPU", dtype, op, std::forward<Body>(body));
}

// dispatch_numeric plus bool: comparisons, logical ops, where, cumsum and sum read bools.
template <class Body>
decltype(auto) dispatch_numeric_or_bool(DType dtype, std::string_view op, Body&& body) {
  if (dtype == DType::boolean) return body.template operator()<bool>();
  return dispatch_numeric(dtype, op, std::forward<Body>(body));
}

// Every dtype, bf16 and bool included (for copies, conversions and selections).
template <class Body>
decltype(auto) dispatch_all(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::f32: return body.template operator()<float>();
    case DType::f64: return body.template operator()<double>();
    case DType::i64: return body.template operator()<int64_t>();
    case DType::u8: return body.template operator()<uint8_t>();
    case DType::bf16: return body.template operator()<BFloat16>();
    case DType::boolean: return body.template operator()<bool>();
  }
  throw DTypeError("unknown dtype");
}

}  // namespace tessera
