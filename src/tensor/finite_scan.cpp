#include "tessera/tensor/finite_scan.h"

#include <algorithm>

namespace tessera::native {

namespace {

// A float is NaN or infinite exactly when all its exponent bits are set. Blocks are scanned
// with a branch-free OR (which the compiler vectorises), and only a block that has one is
// searched element by element.
template <class Bits>
int64_t first_with_exponent(const void* data, int64_t count, Bits exponent) {
  const Bits* bits = static_cast<const Bits*>(data);
  constexpr int64_t kBlock = 1024;
  for (int64_t start = 0; start < count; start += kBlock) {
    const int64_t end = std::min(count, start + kBlock);
    bool any = false;
    for (int64_t i = start; i < end; ++i) any |= (bits[i] & exponent) == exponent;
    if (!any) continue;
    for (int64_t i = start; i < end; ++i) {
      if ((bits[i] & exponent) == exponent) return i;
    }
  }
  return -1;
}

}  // namespace

int64_t first_non_finite(const void* data, int64_t count, DType dtype) {
  if (count <= 0) return -1;
  switch (dtype) {
    case DType::f32: return first_with_exponent<uint32_t>(data, count, 0x7f800000u);
    case DType::f64: return first_with_exponent<uint64_t>(data, count, 0x7ff0000000000000ull);
    case DType::bf16: return first_with_exponent<uint16_t>(data, count, uint16_t{0x7f80});
    default: return -1;
  }
}

}  // namespace tessera::native
