// The caching host allocator (allocator.cpp) as the backends see it: backend_memory.cpp builds
// the pinned host allocator from it over the CUDA runtime's page-locked memory. Internal,
// not installed.
#pragma once

#include <cstddef>

#include "tessera/tensor/allocator.h"

namespace tessera::detail {

// Where a host allocator's blocks come from: pageable memory (aligned_alloc) or, for
// pinned host memory (pinned_host_allocator), page-locked memory from the CUDA runtime.
struct HostMemorySource {
  const char* what;  // for messages: "host memory", "pinned host memory"
  void* (*allocate)(size_t alignment, size_t bytes);  // null when the system has no more
  void (*free)(void* block);
  bool limited;  // bounded by a memory limit (the CPU device's), or never (pinned memory)
};

// The CPU device's allocator: pageable, cached, bounded by the CPU's memory limit.
Allocator& pageable_host_allocator();

// Pageable memory (aligned_alloc / free) under another name and limit.
HostMemorySource pageable_host_memory(const char* what, bool limited);

// A caching allocator over `source`, owned by the caller.
Allocator* new_host_allocator(const HostMemorySource& source);

}  // namespace tessera::detail
