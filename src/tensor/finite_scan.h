// Finding the first NaN or infinity in host memory by exponent bits (internal): one
// vectorised pass with no mask tensor. tessera::first_non_finite uses it for CPU tensors and
// the checkpoint writer for the bytes it saves, so the two answer alike.
#pragma once

#include <cstdint>

#include "tessera/tensor/dtype.h"

namespace tessera::native {

// The index of the first NaN or infinite element among `count` elements of `dtype` at
// `data` (host memory); -1 when every element is finite or the dtype is not a floating one.
int64_t first_non_finite(const void* data, int64_t count, DType dtype);

}  // namespace tessera::native
