// The CUDA caching allocator: device memory comes from cudaMalloc in segments that are
// split into blocks, kept when freed and handed to later requests (block_pool.h says how),
// so a steady training step never calls cudaMalloc or cudaFree (each of which can stall
// the whole device), and a step whose sizes vary reuses memory instead of holding a bin
// per size. Counters as for the CPU (memory_stats), plus the allocator's own figures
// (caching_allocator_stats).
//
// Reuse without waiting is safe because all of a device's work runs in order on its
// compute stream (stream.h): a kernel queued after a block was freed runs after every
// kernel that used it. Work on another stream must either keep its tensors alive until it
// has been ordered back onto the compute stream with an event (the NCCL group's Work does
// that), or say so with record_stream(): the block is then reused only once that stream's
// work up to the free has finished (an event, polled; PyTorch's Tensor.record_stream).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "tessera/tensor/allocator.h"
#include "tessera/tensor/cuda_api.h"
#include "tessera/tensor/tensor.h"

namespace tessera::cuda {

Allocator& caching_allocator(int device_index);
CachingAllocatorStats caching_allocator_figures(int device_index);
// Waits for the device, then returns every wholly free segment to the driver.
void release_cached_blocks(int device_index);
// A block's pending use by another stream (record_stream), for the pinned staging pool too.
class PendingUse;
std::unique_ptr<PendingUse> stream_use(int device, cudaStream_t stream);

// `tensor`'s memory is being used by `stream` too (not only by its device's compute
// stream): when freed, it is not reused before `stream`'s work queued until then is done.
void record_stream(const Tensor& tensor, cudaStream_t stream);

}  // namespace tessera::cuda
