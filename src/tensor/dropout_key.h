// The dropout mask bits, shared by the CPU and CUDA kernels so both drop the same
// elements: row `row` (a global sample index) of a [rows, cols] input, keep when u >= p.
#pragma once

#include "tessera/tensor/native.h"
#include "tessera/tensor/philox.h"

namespace tessera::native {

TS_HOST_DEVICE uint64_t dropout_philox_key(const DropoutKey& key) {
  return key.seed ^ (key.stream * 0x9E3779B97F4A7C15ull);
}

// The four draws for elements [4 * block, 4 * block + 4) of row `row`; lane c % 4 is
// element c's. Both backends call this, so they drop exactly the same elements.
TS_HOST_DEVICE philox::Counter dropout_bits(uint64_t philox_key, uint64_t step, int64_t row, int64_t block) {
  philox::Counter counter{{static_cast<uint32_t>(block), static_cast<uint32_t>(row), static_cast<uint32_t>(step),
                           static_cast<uint32_t>(step >> 32)}};
  return philox::philox4x32_10(counter, philox_key);
}

// Whether element `col` of row `row` is kept: one element of dropout_mask_row's answer, for
// kernels that draw elements out of row order (attention's tiles).
TS_HOST_DEVICE bool dropout_keeps(uint64_t philox_key, uint64_t step, int64_t row, int64_t col, float p) {
  const philox::Counter bits = dropout_bits(philox_key, step, row, col >> 2);
  return philox::unit_float(bits.word[col & 3]) >= p;
}

// Keep-mask for one row: mask[c] = 1 when element c is kept.
inline void dropout_mask_row(const DropoutKey& key, int64_t row, int64_t cols, float p, uint8_t* mask) {
  const uint64_t philox_key = dropout_philox_key(key);
  for (int64_t block = 0; block * 4 < cols; ++block) {
    philox::Counter bits = dropout_bits(philox_key, key.step, row, block);
    for (int lane = 0; lane < 4 && block * 4 + lane < cols; ++lane) {
      mask[block * 4 + lane] = philox::unit_float(bits.word[lane]) >= p;
    }
  }
}

}  // namespace tessera::native
