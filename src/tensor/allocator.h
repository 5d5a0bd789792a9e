// Every tensor allocation goes through the allocator of its device, which counts current
// and peak bytes. FSDP's memory figures and tests read these counters.
//
// Allocators may cache freed blocks for reuse (the CPU and CUDA ones do: a training step
// then never calls the system allocator, and on the CPU never faults in fresh pages).
// Cached blocks are not in current_bytes, which always means "bytes held by live
// storages"; they are counted in cached_bytes, and release_cached_memory() frees them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tessera/tensor/device.h"

namespace tessera {

struct MemoryStats {
  int64_t current_bytes = 0;  // bytes held by live storages
  int64_t peak_bytes = 0;     // highest current_bytes since the last reset_peak()
  int64_t allocations = 0;    // number of allocate() calls so far
  int64_t cached_bytes = 0;   // freed blocks kept for reuse (not in current_bytes)
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* data, size_t nbytes) = 0;

  MemoryStats stats() const;
  // Sets peak to current, so a test can measure the peak of one phase.
  void reset_peak();
  // Returns cached blocks to the system (a no-op for an allocator without a cache).
  virtual void release_cached() {}

 protected:
  void record_allocation(size_t nbytes);
  void record_deallocation(size_t nbytes);
  void record_cached(int64_t delta) { cached_.fetch_add(delta); }

 private:
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> allocations_{0};
  std::atomic<int64_t> cached_{0};
};

// The allocator for `device`. CUDA allocators exist only when CUDA support is compiled in.
Allocator& allocator_for(Device device);

inline MemoryStats memory_stats(Device device = Device::cpu()) { return allocator_for(device).stats(); }
inline void reset_peak_memory(Device device = Device::cpu()) { allocator_for(device).reset_peak(); }
inline void release_cached_memory(Device device = Device::cpu()) { allocator_for(device).release_cached(); }

}  // namespace tessera
