#include "tessera/tensor/cuda/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "tessera/tensor/cuda/cuda_runtime.h"

namespace tessera::cuda {

namespace {

// Sizes are rounded up to 512 bytes so that near-equal requests share blocks.
constexpr size_t kRounding = 512;

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t rounded = (nbytes + kRounding - 1) / kRounding * kRounding;
    void* data = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_blocks_.find(rounded);
      if (it != free_blocks_.end() && !it->second.empty()) {
        data = it->second.back();
        it->second.pop_back();
      }
    }
    if (data == nullptr) {
      TS_CUDA_CHECK(cudaSetDevice(device_));
      if (cudaMalloc(&data, rounded) != cudaSuccess) {
        cudaGetLastError();
        release_cached();
        TS_CUDA_CHECK(cudaMalloc(&data, rounded));
      }
    }
    record_allocation(nbytes);
    return data;
  }

  void deallocate(void* data, size_t nbytes) override {
    if (data == nullptr) return;
    size_t rounded = (nbytes + kRounding - 1) / kRounding * kRounding;
    std::lock_guard<std::mutex> lock(mutex_);
    free_blocks_[rounded].push_back(data);
    record_deallocation(nbytes);
  }

  void release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, blocks] : free_blocks_) {
      for (void* block : blocks) cudaFree(block);
      blocks.clear();
    }
  }

 private:
  int device_;
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_blocks_;
};

}  // namespace

Allocator& caching_allocator(int device_index) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<CachingAllocator>> allocators;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = allocators[device_index];
  if (!slot) {
    TS_CHECK(device_index >= 0 && device_index < device_count(), DeviceError, "cuda:", device_index,
             " requested, but ", device_count(), " CUDA devices are visible");
    slot = std::make_unique<CachingAllocator>(device_index);
  }
  return *slot;
}

}  // namespace tessera::cuda
