#include "tessera/tensor/cuda/cuda_runtime.h"

#include <cuda_runtime_api.h>

namespace tessera::cuda {

void check_status(int status, const char* expression, const char* file, int line) {
  if (status == cudaSuccess) return;
  throw CudaError(detail::concat(expression, " failed at ", file, ":", line, ": ",
                                 cudaGetErrorString(static_cast<cudaError_t>(status))));
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

bool is_available() { return device_count() > 0; }

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  cudaMemcpyKind kind = dst_device.is_cpu() ? cudaMemcpyDeviceToHost
                        : src_device.is_cpu() ? cudaMemcpyHostToDevice
                                              : cudaMemcpyDeviceToDevice;
  TS_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, kind));
}

}  // namespace tessera::cuda
