// Every tensor allocation goes through the allocator of its device, which counts current
// and peak bytes. FSDP's memory figures and tests read these counters.
//
// Allocators may cache freed blocks for reuse (the CPU and CUDA ones do: a training step
// then never calls the system allocator, and on the CPU never faults in fresh pages).
// Cached blocks are not in current_bytes, which always means "bytes held by live
// storages"; they are counted in cached_bytes, and release_cached_memory() frees them.
//
// Each allocator may have a memory limit (memory_limit.h): it never holds more than that
// from the system, cached blocks included, and refuses with OutOfMemoryError.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tessera/tensor/device.h"
#include "tessera/tensor/memory_limit.h"

namespace tessera {

struct MemoryStats {
  int64_t current_bytes = 0;  // bytes held by live storages
  int64_t peak_bytes = 0;     // highest current_bytes since the last reset_peak()
  int64_t allocations = 0;    // number of allocate() calls so far
  int64_t cached_bytes = 0;   // freed blocks kept for reuse (not in current_bytes)
  // Held from the system: live blocks at their allocated (rounded) sizes and cached ones
  // (a CUDA allocator's segments). What a memory limit bounds.
  int64_t reserved_bytes = 0;
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
  // MemoryStats::reserved_bytes.
  virtual int64_t reserved_bytes() const = 0;

  // The memory limit in bytes, or kNoLimit (set_memory_limit in memory_limit.h). It starts
  // as TESSERA_MEMORY_LIMIT says.
  static constexpr int64_t kNoLimit = -1;
  int64_t limit() const { return limit_.load(); }
  // Sets it (kNoLimit removes it) and releases the cached blocks.
  void set_limit(int64_t bytes);

 protected:
  Allocator();
  // The limit as the allocator's memory source reads it (possibly on another thread).
  const std::atomic<int64_t>& limit_counter() const { return limit_; }

  void record_allocation(size_t nbytes);
  void record_deallocation(size_t nbytes);
  void record_cached(int64_t delta) { cached_.fetch_add(delta); }

 private:
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> allocations_{0};
  std::atomic<int64_t> cached_{0};
  std::atomic<int64_t> limit_{kNoLimit};
};

// The allocator for `device`. CUDA allocators exist only when CUDA support is compiled in.
Allocator& allocator_for(Device device);

// Pinned (page-locked) host memory, for tensors the device copies to and from directly
// (Tensor::pin_memory(), FSDP's CPU offload). cudaHostAlloc'd when CUDA is available;
// otherwise ordinary host memory, still counted here and not in memory_stats(cpu), so
// what lives in pinned memory is measurable on any machine. A memory limit (memory_limit.h)
// bounds devices' allocators, not this one.
Allocator& pinned_host_allocator();

inline MemoryStats memory_stats(Device device = Device::cpu()) { return allocator_for(device).stats(); }
inline MemoryStats pinned_memory_stats() { return pinned_host_allocator().stats(); }
inline void reset_peak_memory(Device device = Device::cpu()) { allocator_for(device).reset_peak(); }
inline void release_cached_memory(Device device = Device::cpu()) { allocator_for(device).release_cached(); }

}  // namespace tessera
