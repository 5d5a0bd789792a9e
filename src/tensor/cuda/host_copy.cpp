// Raw copies between host and device memory, through pinned staging buffers.
//
// A DMA transfer needs page-locked host memory. Rather than pinning user memory, each
// device owns two pinned buffers of kStagingBytes, allocated once with cudaHostAlloc and
// reused: host -> device copies a chunk into a free buffer and queues the transfer on the
// compute stream (so kernels queued after it see the data), with an event telling when
// that buffer may be refilled; device -> host queues the transfer, waits for it and copies
// the chunk out. Both ends of a copy are therefore ordered with the device's kernels.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/stream.h"

namespace tessera::cuda {

namespace {

constexpr size_t kStagingBytes = size_t{8} << 20;

struct StagingBuffers {
  explicit StagingBuffers(int device) : device(device) {
    DeviceGuard guard(device);
    for (int i = 0; i < 2; ++i) {
      TS_CUDA_CHECK(cudaHostAlloc(&buffer[i], kStagingBytes, cudaHostAllocPortable));
      TS_CUDA_CHECK(cudaEventCreateWithFlags(&free_again[i], cudaEventDisableTiming));
    }
  }

  int device;
  std::mutex mutex;  // one copy at a time uses these buffers
  std::array<void*, 2> buffer{};
  std::array<cudaEvent_t, 2> free_again{};  // recorded after the transfer reading buffer[i]
};

// Never destroyed: freeing pinned memory at static destruction would race the runtime's
// own teardown, and the operating system reclaims it at exit anyway.
StagingBuffers& staging_for(int device) {
  static auto* mutex = new std::mutex();
  static auto* all = new std::map<int, std::unique_ptr<StagingBuffers>>();
  std::lock_guard<std::mutex> lock(*mutex);
  auto& slot = (*all)[device];
  if (!slot) slot = std::make_unique<StagingBuffers>(device);
  return *slot;
}

void host_to_device(void* dst, int device, const void* src, size_t nbytes) {
  StagingBuffers& staging = staging_for(device);
  std::lock_guard<std::mutex> lock(staging.mutex);
  DeviceGuard guard(device);
  cudaStream_t stream = compute_stream(device);
  for (size_t offset = 0, chunk = 0; offset < nbytes; offset += kStagingBytes, ++chunk) {
    const size_t count = std::min(kStagingBytes, nbytes - offset);
    const size_t slot = chunk % 2;
    // The transfer that last read this buffer must be done before it is refilled.
    TS_CUDA_CHECK(cudaEventSynchronize(staging.free_again[slot]));
    std::memcpy(staging.buffer[slot], static_cast<const char*>(src) + offset, count);
    TS_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + offset, staging.buffer[slot], count,
                                  cudaMemcpyHostToDevice, stream));
    TS_CUDA_CHECK(cudaEventRecord(staging.free_again[slot], stream));
  }
}

void device_to_host(void* dst, int device, const void* src, size_t nbytes) {
  StagingBuffers& staging = staging_for(device);
  std::lock_guard<std::mutex> lock(staging.mutex);
  DeviceGuard guard(device);
  cudaStream_t stream = compute_stream(device);
  for (size_t offset = 0; offset < nbytes; offset += kStagingBytes) {
    const size_t count = std::min(kStagingBytes, nbytes - offset);
    // Buffer 0's last upload may still be in flight.
    TS_CUDA_CHECK(cudaEventSynchronize(staging.free_again[0]));
    TS_CUDA_CHECK(cudaMemcpyAsync(staging.buffer[0], static_cast<const char*>(src) + offset, count,
                                  cudaMemcpyDeviceToHost, stream));
    TS_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::memcpy(static_cast<char*>(dst) + offset, staging.buffer[0], count);
  }
}

void device_to_device(void* dst, int dst_device, const void* src, int src_device, size_t nbytes) {
  if (dst_device == src_device) {
    DeviceGuard guard(dst_device);
    TS_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, compute_stream(dst_device)));
    return;
  }
  // Between devices: the source's producers must be done, and the source must not be
  // freed and reused before the transfer ends, so both streams are waited for.
  synchronize_device(src_device);
  DeviceGuard guard(dst_device);
  cudaStream_t stream = compute_stream(dst_device);
  TS_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, nbytes, stream));
  TS_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device.is_cuda() && src_device.is_cuda()) {
    device_to_device(dst, dst_device.index, src, src_device.index, nbytes);
  } else if (dst_device.is_cuda()) {
    host_to_device(dst, dst_device.index, src, nbytes);
  } else {
    device_to_host(dst, src_device.index, src, nbytes);
  }
}

}  // namespace tessera::cuda
