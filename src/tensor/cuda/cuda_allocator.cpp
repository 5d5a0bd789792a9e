#include "tessera/tensor/cuda/cuda_allocator.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "tessera/tensor/cuda/block_pool.h"
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/stream.h"

namespace tessera::cuda {

namespace {

// A freed block's use by another stream: an event recorded on that stream at the free.
// Nothing here throws (frees run in destructors): if the event cannot be had, the free
// waits for the stream instead, and a device fault counts as done (it surfaces at the
// next checked call).
class StreamUse final : public PendingUse {
 public:
  StreamUse(int device, cudaStream_t stream) {
    try {
      event_ = std::make_unique<Event>(device);
      event_->record(stream);
    } catch (...) {
      event_.reset();
      cudaStreamSynchronize(stream);
      cudaGetLastError();
    }
  }
  bool done() override {
    if (!event_) return true;
    const cudaError_t status = cudaEventQuery(event_->handle());
    if (status == cudaSuccess) return true;
    cudaGetLastError();
    return status != cudaErrorNotReady;
  }
  void wait() override {
    if (event_ && cudaEventSynchronize(event_->handle()) != cudaSuccess) cudaGetLastError();
  }

 private:
  std::unique_ptr<Event> event_;
};

// Segments from cudaMalloc; null when the device is out of memory, or when the segment
// would take the segments' total past the allocator's memory limit (memory_limit.h).
class DeviceMemory final : public MemorySource {
 public:
  DeviceMemory(int device, const std::atomic<int64_t>& limit) : device_(device), limit_(limit) {}

  void* allocate_segment(size_t bytes) override {
    const int64_t cap = limit_.load();
    if (cap != Allocator::kNoLimit && total_ + static_cast<int64_t>(bytes) > cap) return nullptr;
    DeviceGuard guard(device_);
    void* data = nullptr;
    const cudaError_t status = cudaMalloc(&data, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // out of memory is an answer here; the pool makes room and retries
      return nullptr;
    }
    TS_CUDA_CHECK(status);
    total_ += static_cast<int64_t>(bytes);
    return data;
  }

  void free_segment(void* segment, size_t bytes) override {
    total_ -= static_cast<int64_t>(bytes);
    DeviceGuard guard(device_);
    // cudaFree waits for the device: nothing queued can still use the segment. A fault
    // from an earlier kernel surfaces at the next checked call instead of here.
    if (cudaFree(segment) != cudaSuccess) cudaGetLastError();
  }

  std::unique_ptr<PendingUse> pending_use(void* stream) override {
    return stream_use(device_, static_cast<cudaStream_t>(stream));
  }

 private:
  int device_;
  const std::atomic<int64_t>& limit_;
  int64_t total_ = 0;  // in segments now (the pool's owner holds its lock around every call)
};

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device), memory_(device, limit_counter()), pool_(memory_) {}

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    void* data = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      data = pool_.allocate(nbytes);
      sync_cached_counter();
    }
    if (data == nullptr) {
      const MemoryStats in_use = stats();
      const CachingAllocatorStats held = figures();
      const int64_t cap = limit();
      const auto segment = static_cast<int64_t>(BlockPool::segment_size_for(BlockPool::rounded(nbytes)));
      if (cap != kNoLimit && held.reserved_bytes + segment > cap) {
        detail::throw_over_limit(Device::cuda(device_), static_cast<int64_t>(nbytes), cap, in_use.current_bytes,
                                 held.reserved_bytes);
      }
      throw CudaError(detail::concat("cudaMalloc of ", BlockPool::segment_size_for(BlockPool::rounded(nbytes)),
                                     " bytes (for a ", nbytes, "-byte tensor) on cuda:", device_,
                                     " failed: out of memory; ", in_use.current_bytes,
                                     " bytes are in use by tensors, ", held.reserved_bytes,
                                     " reserved by the caching allocator"));
    }
    record_allocation(nbytes);
    return data;
  }

  void deallocate(void* data, size_t nbytes) override {
    if (data == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    pool_.deallocate(data);
    sync_cached_counter();
    record_deallocation(nbytes);
  }

  void release_cached() override {
    DeviceGuard guard(device_);
    std::lock_guard<std::mutex> lock(mutex_);
    pool_.release_free_segments(/*wait_pending=*/true);
    sync_cached_counter();
  }

  void record_use(void* data, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    pool_.record_use(data, stream);
  }

  int64_t reserved_bytes() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return pool_.figures().reserved_bytes;
  }

  CachingAllocatorStats figures() {
    std::lock_guard<std::mutex> lock(mutex_);
    const BlockPoolFigures& pool = pool_.figures();
    return {pool.segment_allocations, pool.segment_frees, pool.cached_bytes, pool.reserved_bytes};
  }

 private:
  // memory_stats(cuda:i).cached_bytes follows the pool's.
  void sync_cached_counter() {
    const int64_t now = pool_.figures().cached_bytes;
    record_cached(now - reported_cached_);
    reported_cached_ = now;
  }

  int device_;
  mutable std::mutex mutex_;
  DeviceMemory memory_;
  BlockPool pool_;
  int64_t reported_cached_ = 0;
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

std::unique_ptr<PendingUse> stream_use(int device, cudaStream_t stream) {
  return std::make_unique<StreamUse>(device, stream);
}

CachingAllocatorStats caching_allocator_figures(int device_index) { return allocator_of(device_index).figures(); }

void release_cached_blocks(int device_index) { allocator_of(device_index).release_cached(); }

void record_stream(const Tensor& tensor, cudaStream_t stream) {
  TS_CHECK(tensor.defined() && tensor.is_cuda(), DeviceError, "record_stream: expected a CUDA tensor, got ",
           tensor.defined() ? tensor.device().str() : std::string("an undefined tensor"));
  void* base = tensor.storage()->data();
  if (base == nullptr) return;  // no bytes (empty, or an FSDP buffer released)
  allocator_of(tensor.device().index).record_use(base, stream);
}

}  // namespace tessera::cuda
