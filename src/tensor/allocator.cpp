#include "tessera/tensor/allocator.h"

#include <cstdlib>
#include <new>

#include "tessera/config.h"
#include "tessera/tensor/error.h"

#if TESSERA_HAS_CUDA
#include "tessera/tensor/cuda/cuda_allocator.h"
#endif

namespace tessera {

MemoryStats Allocator::stats() const {
  return {current_.load(), peak_.load(), allocations_.load()};
}

void Allocator::reset_peak() { peak_.store(current_.load()); }

void Allocator::record_allocation(size_t nbytes) {
  int64_t now = current_.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
  int64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  allocations_.fetch_add(1);
}

void Allocator::record_deallocation(size_t nbytes) { current_.fetch_sub(static_cast<int64_t>(nbytes)); }

namespace {

// 64-byte aligned host memory: a cache line and a full AVX-512 vector.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    void* data = std::aligned_alloc(kAlignment, rounded);
    if (data == nullptr) {
      throw Error(detail::concat("out of host memory allocating ", nbytes, " bytes"));
    }
    record_allocation(nbytes);
    return data;
  }
  void deallocate(void* data, size_t nbytes) override {
    if (data == nullptr) return;
    std::free(data);
    record_deallocation(nbytes);
  }

 private:
  static constexpr size_t kAlignment = 64;
};

}  // namespace

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) {
    static CpuAllocator cpu_allocator;
    return cpu_allocator;
  }
#if TESSERA_HAS_CUDA
  return cuda::caching_allocator(device.index);
#else
  throw NotCompiledError(detail::concat("device ", device.str(),
                                        " requested, but Tessera was built without CUDA support"));
#endif
}

}  // namespace tessera
