#include "tessera/tensor/cuda/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/stream.h"

namespace tessera::cuda {

namespace {

// Sizes are rounded up to 512 bytes so that near-equal requests share blocks (and every
// block is aligned for vector loads).
constexpr size_t kRounding = 512;

size_t rounded_size(size_t nbytes) { return (nbytes + kRounding - 1) / kRounding * kRounding; }

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    const size_t rounded = rounded_size(nbytes);
    void* data = take_cached(rounded);
    if (data == nullptr) data = allocate_from_driver(nbytes, rounded);
    record_allocation(nbytes);
    return data;
  }

  void deallocate(void* data, size_t nbytes) override {
    if (data == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    free_blocks_[rounded_size(nbytes)].push_back(data);
    cached_bytes_ += static_cast<int64_t>(rounded_size(nbytes));
    record_deallocation(nbytes);
  }

  void release_cached() {
    DeviceGuard guard(device_);
    // A cached block may still be read by queued kernels: let them finish first.
    TS_CUDA_CHECK(cudaStreamSynchronize(compute_stream(device_)));
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, blocks] : free_blocks_) {
      for (void* block : blocks) {
        TS_CUDA_CHECK(cudaFree(block));
        ++figures_.device_frees;
        figures_.reserved_bytes -= static_cast<int64_t>(size);
      }
      blocks.clear();
    }
    cached_bytes_ = 0;
  }

  CachingAllocatorStats figures() {
    std::lock_guard<std::mutex> lock(mutex_);
    CachingAllocatorStats result = figures_;
    result.cached_bytes = cached_bytes_;
    return result;
  }

 private:
  void* take_cached(size_t rounded) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_blocks_.find(rounded);
    if (it == free_blocks_.end() || it->second.empty()) return nullptr;
    void* data = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= static_cast<int64_t>(rounded);
    return data;
  }

  void* allocate_from_driver(size_t nbytes, size_t rounded) {
    DeviceGuard guard(device_);
    void* data = nullptr;
    cudaError_t status = cudaMalloc(&data, rounded);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it, give the cache back to the driver and try once more
      release_cached();
      status = cudaMalloc(&data, rounded);
    }
    if (status != cudaSuccess) {
      cudaGetLastError();
      MemoryStats in_use = stats();
      throw CudaError(detail::concat("cudaMalloc of ", rounded, " bytes (for a ", nbytes, "-byte tensor) on cuda:",
                                     device_, " failed: ", cudaGetErrorString(status), "; ", in_use.current_bytes,
                                     " bytes are in use by tensors"));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++figures_.device_mallocs;
    figures_.reserved_bytes += static_cast<int64_t>(rounded);
    return data;
  }

  int device_;
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_blocks_;
  int64_t cached_bytes_ = 0;
  CachingAllocatorStats figures_;
};

CachingAllocator& allocator_of(int device_index) {
  // Never destroyed: tensors held in static storage may be freed after main() returns.
  static auto* mutex = new std::mutex();
  static auto* allocators = new std::map<int, std::unique_ptr<CachingAllocator>>();
  std::lock_guard<std::mutex> lock(*mutex);
  auto& slot = (*allocators)[device_index];
  if (!slot) {
    check_device_index(device_index);
    slot = std::make_unique<CachingAllocator>(device_index);
  }
  return *slot;
}

}  // namespace

Allocator& caching_allocator(int device_index) { return allocator_of(device_index); }

CachingAllocatorStats caching_allocator_figures(int device_index) { return allocator_of(device_index).figures(); }

void release_cached_blocks(int device_index) { allocator_of(device_index).release_cached(); }

}  // namespace tessera::cuda
