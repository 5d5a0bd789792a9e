// Value conversion between element types (bfloat16 goes through float).
#pragma once

#include "tessera/tensor/dtype.h"

namespace tessera::cpu {

template <class To, class From>
inline To convert(From value) {
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else if constexpr (std::is_same_v<From, BFloat16>) {
    return static_cast<To>(static_cast<float>(value));
  } else if constexpr (std::is_same_v<To, BFloat16>) {
    return BFloat16(static_cast<float>(value));
  } else {
    return static_cast<To>(value);
  }
}

}  // namespace tessera::cpu
