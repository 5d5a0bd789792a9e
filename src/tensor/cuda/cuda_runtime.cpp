#include "tessera/tensor/cuda/cuda_runtime.h"

#include <cuda_runtime_api.h>

namespace tessera::cuda {

namespace {

// cuDevicePrimaryCtxGetState(CUdevice, unsigned int* flags, int* active), fetched through
// the runtime's driver entry point so that Tessera need not link the driver library
// itself. CUresult and CUdevice are ints; a device's runtime ordinal is its CUdevice.
using PrimaryContextState = int (*)(int, unsigned int*, int*);

PrimaryContextState primary_context_state() {
  static const PrimaryContextState query = []() -> PrimaryContextState {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &function, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return reinterpret_cast<PrimaryContextState>(function);
  }();
  return query;
}

}  // namespace

bool has_primary_context(int device) {
  PrimaryContextState query = primary_context_state();
  if (query == nullptr) return true;  // cannot tell: assume it has one (the restoring is then as before)
  unsigned int flags = 0;
  int active = 0;
  if (query(device, &flags, &active) != 0) return true;
  return active != 0;
}

DeviceGuard::DeviceGuard(int device) : current_(device) {
  check_device_index(device);
  // cudaGetDevice creates no context: a thread that never chose a device reads 0.
  TS_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) TS_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  // Restoring a device that has no context would create one (cudaSetDevice initialises the
  // primary context): ~500 MB on GPU 0 for every rank and every thread that only ever used
  // its own GPU. So, as PyTorch's MaybeSetDevice, restore only a device already in use.
  // A destructor must not throw; restoring a device that was current before cannot fail.
  if (previous_ >= 0 && previous_ != current_ && has_primary_context(previous_)) cudaSetDevice(previous_);
}

void check_device_index(int device) {
  const int count = device_count();
  TS_CHECK(device >= 0 && device < count, DeviceError, "cuda:", device, " requested, but ", count,
           " CUDA devices are visible", count == 0 ? detail::concat(" (", unavailable_reason(), ")") : std::string());
}

}  // namespace tessera::cuda
