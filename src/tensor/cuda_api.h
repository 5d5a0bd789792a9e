// The CUDA runtime as users see it: is there a device, which one, wait for it, and the
// one numerical switch (TF32). Declared in every build; without CUDA support compiled
// in, is_available() is false, device_count() is 0, synchronize() has nothing to wait
// for and the functions about a particular device throw NotCompiledError.
//
//   ts::Device device = ts::cuda::is_available() ? ts::Device::cuda(0) : ts::Device::cpu();
//   model.to(device);
//   ...
//   ts::cuda::synchronize();  // before reading a timer
#pragma once

#include <cstdint>
#include <string>

#include "tessera/tensor/error.h"

namespace tessera::cuda {

// A failed CUDA, cuBLAS or cuDNN call (or device allocation); the message names the call,
// the source file and line, and the library's own description of the status.
class CudaError : public Error {
  using Error::Error;
};

// True when this build of Tessera has the CUDA backend.
bool is_compiled();
// True when the backend is compiled in and at least one device is visible.
bool is_available();
// Visible devices; 0 without CUDA, without a device, or with a driver too old for the toolkit.
int device_count();
// Why is_available() is false ("" when it is true): not compiled, no device, or the
// driver's own error (e.g. a driver older than the toolkit Tessera was built with).
std::string unavailable_reason();
// "NVIDIA H200"; throws DeviceError for an index that is not a visible device.
std::string device_name(int device);

// Waits until all work Tessera queued on `device` (or, without an argument, on every
// device it has used) has finished; rethrows a fault from an earlier kernel as CudaError.
void synchronize();
void synchronize(int device);

// TF32 tensor cores for float32 matrix products and convolutions. Off by default, so
// float32 results match the CPU's to float32 rounding; on, GEMMs and convolutions run
// several times faster with a 10-bit mantissa in their products (PyTorch's allow_tf32).
void set_allow_tf32(bool allow);
bool allow_tf32();

// The caching allocator's own figures for `device` (tensor bytes in use are in
// memory_stats(Device::cuda(i))): how often it asked the driver for memory and gave
// memory back, and the bytes it holds cached for reuse. A steady training step leaves
// device_mallocs unchanged.
struct CachingAllocatorStats {
  int64_t device_mallocs = 0;  // cudaMalloc calls
  int64_t device_frees = 0;    // cudaFree calls
  int64_t cached_bytes = 0;    // freed blocks kept for reuse
  int64_t reserved_bytes = 0;  // everything obtained from cudaMalloc and not yet freed
};
CachingAllocatorStats caching_allocator_stats(int device = 0);
// Returns the cached (unused) blocks of `device` to the driver, as torch.cuda.empty_cache().
void empty_cache(int device = 0);

}  // namespace tessera::cuda
