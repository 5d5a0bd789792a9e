// The CUDA caching allocator: freed blocks are kept per size and reused, so a steady
// training step never calls cudaMalloc or cudaFree. Counters as for the CPU.
#pragma once

#include "tessera/tensor/allocator.h"

namespace tessera::cuda {

Allocator& caching_allocator(int device_index);

}  // namespace tessera::cuda
