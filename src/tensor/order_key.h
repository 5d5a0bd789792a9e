// Sort keys for topk: an unsigned integer whose order is the numeric order of the value,
// with NaN above +inf (every NaN alike) and -0 equal to +0. The CPU sorts these keys and so
// does CUDA (CUB's segmented sort on integers), so both order every input the same way;
// equal keys then go by position. Header-only, for host and device code.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TS_ORDER_KEY __host__ __device__ __forceinline__
#else
#define TS_ORDER_KEY inline
#endif

namespace tessera::order_key {

TS_ORDER_KEY uint32_t of(float value) {
  if (value != value) return 0xFFFFFFFFu;
  if (value == 0.0f) value = 0.0f;  // -0 -> +0
  uint32_t bits;
#if defined(__CUDA_ARCH__)
  bits = __float_as_uint(value);
#else
  std::memcpy(&bits, &value, sizeof bits);
#endif
  // Negative numbers: larger magnitude is smaller, so flip every bit; positive: set the sign.
  return (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
}

TS_ORDER_KEY uint64_t of(double value) {
  if (value != value) return 0xFFFFFFFFFFFFFFFFull;
  if (value == 0.0) value = 0.0;
  uint64_t bits;
#if defined(__CUDA_ARCH__)
  bits = static_cast<uint64_t>(__double_as_longlong(value));
#else
  std::memcpy(&bits, &value, sizeof bits);
#endif
  return (bits & 0x8000000000000000ull) != 0 ? ~bits : (bits | 0x8000000000000000ull);
}

TS_ORDER_KEY uint64_t of(int64_t value) { return static_cast<uint64_t>(value) ^ 0x8000000000000000ull; }

TS_ORDER_KEY uint32_t of(uint8_t value) { return value; }

// The key type of T: 32 bits for float and uint8, 64 for double and int64.
template <class T>
using Key = decltype(of(T{}));

}  // namespace tessera::order_key
