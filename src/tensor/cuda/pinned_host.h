// Page-locked host memory from the CUDA runtime, for the pinned host allocator
// (backend_memory.cpp); the staging buffers of host_copy.cpp are a pool of their own.
#pragma once

#include <cstddef>

namespace tessera::cuda {

// cudaHostAlloc (portable: usable with every device) on the calling thread's current
// device; null when the system has no more page-locked memory.
void* allocate_pinned_host(size_t bytes);
void free_pinned_host(void* block);

}  // namespace tessera::cuda
