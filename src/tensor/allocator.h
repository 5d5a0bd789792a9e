// Every tensor allocation goes through the allocator of its device, which counts current
// and peak bytes. FSDP's memory figures and tests read these counters.
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
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* data, size_t nbytes) = 0;

  MemoryStats stats() const;
  // Sets peak to current, so a test can measure the peak of one phase.
  void reset_peak();

 protected:
  void record_allocation(size_t nbytes);
  void record_deallocation(size_t nbytes);

 private:
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> allocations_{0};
};

// The allocator for `device`. CUDA allocators exist only when CUDA support is compiled in.
Allocator& allocator_for(Device device);

inline MemoryStats memory_stats(Device device = Device::cpu()) { return allocator_for(device).stats(); }
inline void reset_peak_memory(Device device = Device::cpu()) { allocator_for(device).reset_peak(); }

}  // namespace tessera
