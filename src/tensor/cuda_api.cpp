// The public CUDA runtime functions, in every build: with CUDA they query the runtime and
// forward to cuda/; without it they report that no device exists.
#include "tessera/tensor/cuda_api.h"

#include <atomic>

#include "tessera/config.h"
#include "tessera/tensor/error.h"

#if TESSERA_HAS_CUDA
#include <cuda_runtime_api.h>

#include "tessera/tensor/cuda/cuda_allocator.h"
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/stream.h"
#endif

namespace tessera::cuda {

namespace {

std::atomic<bool> tf32_allowed{false};

#if TESSERA_HAS_CUDA
// cudaGetDeviceCount's answer, asked once: the device set cannot change while a process
// runs, and the error (no device, old driver) is worth keeping for unavailable_reason().
struct DeviceCount {
  int count = 0;
  cudaError_t status = cudaSuccess;
};

const DeviceCount& visible_devices() {
  static const DeviceCount answer = [] {
    DeviceCount result;
    result.status = cudaGetDeviceCount(&result.count);
    if (result.status != cudaSuccess) {
      result.count = 0;
      cudaGetLastError();  // clear the error so that later calls do not report it
    }
    return result;
  }();
  return answer;
}
#endif

}  // namespace

bool is_compiled() { return TESSERA_HAS_CUDA != 0; }

bool is_available() { return device_count() > 0; }

#if TESSERA_HAS_CUDA

int device_count() { return visible_devices().count; }

std::string unavailable_reason() {
  const DeviceCount& devices = visible_devices();
  if (devices.count > 0) return "";
  if (devices.status != cudaSuccess) {
    return detail::concat("cudaGetDeviceCount: ", cudaGetErrorName(devices.status), " (",
                          cudaGetErrorString(devices.status), ")");
  }
  return "no CUDA device is visible";
}

std::string device_name(int device) {
  check_device_index(device);
  cudaDeviceProp properties{};
  TS_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return properties.name;
}

void synchronize() { synchronize_used_devices(); }

void synchronize(int device) { synchronize_device(device); }

CachingAllocatorStats caching_allocator_stats(int device) { return caching_allocator_figures(device); }

void empty_cache(int device) { release_cached_blocks(device); }

#else

namespace {
[[noreturn]] void not_compiled(const char* what) {
  throw NotCompiledError(detail::concat(what, ": Tessera was built without CUDA support"));
}
}  // namespace

int device_count() { return 0; }
std::string unavailable_reason() { return "Tessera was built without CUDA support"; }
std::string device_name(int) { not_compiled("cuda::device_name"); }
void synchronize() {}
void synchronize(int) { not_compiled("cuda::synchronize"); }
CachingAllocatorStats caching_allocator_stats(int) { not_compiled("cuda::caching_allocator_stats"); }
void empty_cache(int) { not_compiled("cuda::empty_cache"); }

#endif

void set_allow_tf32(bool allow) { tf32_allowed.store(allow); }
bool allow_tf32() { return tf32_allowed.load(); }

}  // namespace tessera::cuda
