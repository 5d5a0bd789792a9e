// A (height, width) pair that also accepts one number for both, like PyTorch's
// kernel_size=3 or stride=(2, 1): Size2 s = 3; Size2 t = {2, 1};
#pragma once

#include <cstdint>

namespace tessera {

struct Size2 {
  int64_t h = 0, w = 0;
  // Given as one number: layers print it back as one (MaxPool2d(kernel_size=3, ...)), as
  // PyTorch prints the argument it was given.
  bool one_number = false;
  constexpr Size2(int64_t both) : h(both), w(both), one_number(true) {}  // NOLINT: implicit on purpose
  constexpr Size2(int64_t height, int64_t width) : h(height), w(width) {}
  constexpr int64_t operator[](int i) const { return i == 0 ? h : w; }
  // The same pair, however it was written.
  constexpr bool operator==(const Size2& other) const { return h == other.h && w == other.w; }
};

}  // namespace tessera
