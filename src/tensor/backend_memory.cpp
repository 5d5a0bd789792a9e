// Each device's memory services from its backend: the allocator of a device, pinned host
// memory, and byte copies between devices. With native_dispatch.cpp, the only place that
// knows the backends: allocator.cpp and storage.cpp are the same in every build.
#include "tessera/config.h"
#include "tessera/tensor/allocator.h"
#include "tessera/tensor/cuda_api.h"
#include "tessera/tensor/error.h"
#include "tessera/tensor/host_allocator.h"
#include "tessera/tensor/storage.h"

#if TESSERA_HAS_CUDA
#include "tessera/tensor/cuda/cuda_allocator.h"
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/pinned_host.h"
#endif

#include <cstring>

namespace tessera {

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return detail::pageable_host_allocator();
#if TESSERA_HAS_CUDA
  return cuda::caching_allocator(device.index);
#else
  throw NotCompiledError(detail::concat("device ", device.str(),
                                        " requested, but Tessera was built without CUDA support"));
#endif
}

Allocator& pinned_host_allocator() {
  // Page-locked through the CUDA runtime when there is a device to transfer to; otherwise
  // (a CPU-only build or machine) plain host memory under its own counters, so that code
  // and tests of pinned tensors (FSDP's CPU offload) run the same everywhere.
  // Never destroyed: freeing page-locked memory at static destruction would race the CUDA
  // runtime's own teardown (the operating system reclaims it at exit).
  static Allocator* pinned_allocator = [] {
#if TESSERA_HAS_CUDA
    if (cuda::is_available()) {
      return detail::new_host_allocator({"pinned host memory",
                                         [](size_t, size_t bytes) { return cuda::allocate_pinned_host(bytes); },
                                         cuda::free_pinned_host, false});
    }
#endif
    return detail::new_host_allocator(detail::pageable_host_memory("pinned host memory", /*limited=*/false));
  }();
  return *pinned_allocator;
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes, HostSide host) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, nbytes);
    return;
  }
#if TESSERA_HAS_CUDA
  cuda::copy_bytes(dst, dst_device, src, src_device, nbytes, host);
#else
  (void)host;
  throw NotCompiledError("copy between host and CUDA memory: Tessera was built without CUDA support");
#endif
}

}  // namespace tessera
