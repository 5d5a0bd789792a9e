// Raw copies between host and device memory, through pinned staging memory.
//
// A DMA transfer needs page-locked host memory. Rather than pinning user memory, each
// device has a pool of pinned staging memory (cudaHostAlloc segments, at most
// kPinnedLimit, carved into blocks by a BlockPool): host -> device copies each chunk into
// a staging block, queues its transfer on the compute stream (so kernels queued after it
// see the data) and returns the block to the pool with the transfer as a pending use, so
// the block is refilled only once that transfer has run and the copy returns at once;
// device -> host queues the transfer into a staging block, waits for it and copies the
// chunk out. Both ends of a copy are therefore ordered with the device's kernels, and a
// host -> device copy never waits for the device (until kPinnedLimit bytes of transfers
// are still queued). Between two devices, the copy runs on the destination's stream after
// an event from the source's, and the source's stream waits for it before anything can
// reuse the source's memory: no host wait either.
//
// A host side in pinned memory (HostSide in storage.h: a pinned tensor's storage) needs no
// staging: the transfer reads or writes it directly, and from the host it may be queued
// without waiting (FSDP's offloaded shards going to the all-gather).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "tessera/tensor/cuda/block_pool.h"
#include "tessera/tensor/cuda/cuda_allocator.h"
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/pinned_host.h"
#include "tessera/tensor/cuda/stream.h"

namespace tessera::cuda {

namespace {

constexpr size_t kChunkBytes = size_t{8} << 20;     // one transfer
constexpr size_t kPinnedLimit = size_t{256} << 20;  // staging memory per device

// Pinned host segments, up to kPinnedLimit per device.
class PinnedMemory final : public MemorySource {
 public:
  explicit PinnedMemory(int device) : device_(device) {}

  void* allocate_segment(size_t bytes) override {
    if (total_ + bytes > kPinnedLimit) return nullptr;  // the pool waits for queued transfers instead
    DeviceGuard guard(device_);
    void* data = allocate_pinned_host(bytes);
    if (data != nullptr) total_ += bytes;
    return data;
  }

  void free_segment(void* segment, size_t bytes) override {
    if (cudaFreeHost(segment) != cudaSuccess) cudaGetLastError();
    total_ -= bytes;
  }

  // The transfer that read a staging block: an event after it (as the device allocator's).
  std::unique_ptr<PendingUse> pending_use(void* stream) override {
    return stream_use(device_, static_cast<cudaStream_t>(stream));
  }

 private:
  int device_;
  size_t total_ = 0;
};

struct Staging {
  explicit Staging(int device) : device(device), memory(device), pool(memory) {}
  int device;
  std::mutex mutex;  // guards the pool
  PinnedMemory memory;
  BlockPool pool;
};

// Never destroyed: freeing pinned memory at static destruction would race the runtime's
// own teardown, and the operating system reclaims it at exit anyway.
Staging& staging_for(int device) {
  static auto* mutex = new std::mutex();
  static auto* all = new std::map<int, std::unique_ptr<Staging>>();
  std::lock_guard<std::mutex> lock(*mutex);
  auto& slot = (*all)[device];
  if (!slot) slot = std::make_unique<Staging>(device);
  return *slot;
}

// A staging block, returned to the pool when it goes out of scope (after `transfer`, if
// one was queued from it, has run).
class StagingBlock {
 public:
  StagingBlock(Staging& staging, size_t bytes) : staging_(staging) {
    std::lock_guard<std::mutex> lock(staging_.mutex);
    data_ = staging_.pool.allocate(bytes);
    TS_CHECK(data_ != nullptr, CudaError, "cuda:", staging_.device, ": cannot pin ", bytes,
             " bytes of host memory for a copy");
  }
  ~StagingBlock() {
    std::lock_guard<std::mutex> lock(staging_.mutex);
    try {
      if (transfer_ != nullptr) staging_.pool.record_use(data_, transfer_);
    } catch (...) {  // cannot fail for a block of this pool
    }
    staging_.pool.deallocate(data_);
  }
  StagingBlock(const StagingBlock&) = delete;
  StagingBlock& operator=(const StagingBlock&) = delete;

  void* data() const { return data_; }
  // A transfer reading this block was queued on `stream`.
  void read_by(cudaStream_t stream) { transfer_ = stream; }

 private:
  Staging& staging_;
  void* data_ = nullptr;
  cudaStream_t transfer_ = nullptr;
};

void host_to_device(void* dst, int device, const void* src, size_t nbytes) {
  Staging& staging = staging_for(device);
  DeviceGuard guard(device);
  cudaStream_t stream = compute_stream(device);
  for (size_t offset = 0; offset < nbytes; offset += kChunkBytes) {
    const size_t count = std::min(kChunkBytes, nbytes - offset);
    StagingBlock block(staging, count);
    std::memcpy(block.data(), static_cast<const char*>(src) + offset, count);
    TS_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + offset, block.data(), count, cudaMemcpyHostToDevice,
                                  stream));
    block.read_by(stream);
  }
}

void device_to_host(void* dst, int device, const void* src, size_t nbytes) {
  Staging& staging = staging_for(device);
  DeviceGuard guard(device);
  cudaStream_t stream = compute_stream(device);
  for (size_t offset = 0; offset < nbytes; offset += kChunkBytes) {
    const size_t count = std::min(kChunkBytes, nbytes - offset);
    StagingBlock block(staging, count);
    TS_CUDA_CHECK(cudaMemcpyAsync(block.data(), static_cast<const char*>(src) + offset, count,
                                  cudaMemcpyDeviceToHost, stream));
    wait_for_stream(stream, device);
    std::memcpy(static_cast<char*>(dst) + offset, block.data(), count);
  }
}

// Directly between pinned host memory and the device, on the compute stream; waited for
// unless `wait` is false (host to device only).
void pinned_transfer(void* dst, const void* src, size_t nbytes, int device, cudaMemcpyKind kind, bool wait) {
  DeviceGuard guard(device);
  cudaStream_t stream = compute_stream(device);
  TS_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, stream));
  if (wait) wait_for_stream(stream, device);
}

void device_to_device(void* dst, int dst_device, const void* src, int src_device, size_t nbytes) {
  if (dst_device == src_device) {
    DeviceGuard guard(dst_device);
    TS_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, compute_stream(dst_device)));
    return;
  }
  // Between devices: after the source's producers, on the destination's stream; and the
  // source's stream (where its memory would be reused) waits for the copy.
  cudaStream_t source_stream = compute_stream(src_device);
  cudaStream_t destination_stream = compute_stream(dst_device);
  Event produced(src_device);
  produced.record(source_stream);
  produced.block(destination_stream);
  {
    DeviceGuard guard(dst_device);
    TS_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, nbytes, destination_stream));
  }
  Event copied(dst_device);
  copied.record(destination_stream);
  copied.block(source_stream);
}

}  // namespace

void* allocate_pinned_host(size_t bytes) {
  void* data = nullptr;
  const cudaError_t status = cudaHostAlloc(&data, bytes, cudaHostAllocPortable);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  TS_CUDA_CHECK(status);
  return data;
}

void free_pinned_host(void* block) {
  if (cudaFreeHost(block) != cudaSuccess) cudaGetLastError();
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes, HostSide host) {
  if (nbytes == 0) return;
  if (dst_device.is_cuda() && src_device.is_cuda()) {
    device_to_device(dst, dst_device.index, src, src_device.index, nbytes);
  } else if (host != HostSide::pageable) {
    const bool to_device = dst_device.is_cuda();
    pinned_transfer(dst, src, nbytes, to_device ? dst_device.index : src_device.index,
                    to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                    !(to_device && host == HostSide::pinned_non_blocking));
  } else if (dst_device.is_cuda()) {
    host_to_device(dst, dst_device.index, src, nbytes);
  } else {
    device_to_host(dst, src_device.index, src, nbytes);
  }
}

}  // namespace tessera::cuda
