// bfloat16 results compared as bit patterns (the bfloat16 tests against PyTorch and float64).
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include <tessera/tessera.h>

namespace test_support {

// The bit patterns of a bfloat16 tensor's elements, in row-major order.
inline std::vector<uint16_t> bf16_bits(const tessera::Tensor& t) {
  REQUIRE(t.dtype() == tessera::DType::bf16);
  tessera::Tensor c = t.contiguous();
  const tessera::BFloat16* p = c.data_ptr<tessera::BFloat16>();
  std::vector<uint16_t> out(static_cast<size_t>(c.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = p[i].bits;
  return out;
}

// Distance in bfloat16 steps between two finite values (sign and magnitude made one order).
inline int64_t bf16_steps_apart(uint16_t x, uint16_t y) {
  auto ordered = [](uint16_t v) { return (v & 0x8000) ? -int64_t{v & 0x7fff} : int64_t{v}; };
  return std::llabs(ordered(x) - ordered(y));
}

}  // namespace test_support
