// The CUDA caching allocator: blocks freed by tensors are kept per (rounded) size and
// handed to the next request of that size, so a steady training step never calls
// cudaMalloc or cudaFree (each of which can stall the whole device). Counters as for the
// CPU (memory_stats), plus the allocator's own figures (caching_allocator_stats).
//
// Reuse without waiting is safe because all of a device's work runs in order on its
// compute stream (stream.h): a kernel queued after a block was freed runs after every
// kernel that used it. Work on another stream must keep its tensors alive until it has
// been ordered back onto the compute stream with an event.
#pragma once

#include "tessera/tensor/allocator.h"
#include "tessera/tensor/cuda_api.h"

namespace tessera::cuda {

Allocator& caching_allocator(int device_index);
CachingAllocatorStats caching_allocator_figures(int device_index);
// Waits for the device, then returns every cached block to the driver.
void release_cached_blocks(int device_index);

}  // namespace tessera::cuda
