// A (height, width) pair that also accepts one number for both, like PyTorch's
// kernel_size=3 or stride=(2, 1): Size2 s = 3; Size2 t = {2, 1};
#pragma once

#include <cstdint>

namespace tessera {

struct Size2 {
  int64_t h = 0, w = 0;
  constexpr Size2(int64_t both) : h(both), w(both) {}  // NOLINT: implicit on purpose
  constexpr Size2(int64_t height, int64_t width) : h(height), w(width) {}
  constexpr int64_t operator[](int i) const { return i == 0 ? h : w; }
  constexpr bool operator==(const Size2&) const = default;
};

}  // namespace tessera
