#include "tessera/tensor/cuda/cuda_runtime.h"

#include <cuda_runtime_api.h>

namespace tessera::cuda {

DeviceGuard::DeviceGuard(int device) : current_(device) {
  check_device_index(device);
  TS_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) TS_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  // A destructor must not throw; restoring the previous device cannot fail for a device
  // that was current before.
  if (previous_ >= 0 && previous_ != current_) cudaSetDevice(previous_);
}

void check_device_index(int device) {
  const int count = device_count();
  TS_CHECK(device >= 0 && device < count, DeviceError, "cuda:", device, " requested, but ", count,
           " CUDA devices are visible", count == 0 ? detail::concat(" (", unavailable_reason(), ")") : std::string());
}

}  // namespace tessera::cuda
