// The CUDA runtime seam: error checking, device queries and copies. Compiled only when
// Tessera is built with CUDA (TESSERA_HAS_CUDA).
#pragma once

#include <cstddef>

#include "tessera/tensor/device.h"
#include "tessera/tensor/error.h"

namespace tessera::cuda {

class CudaError : public Error {
  using Error::Error;
};

// Throws CudaError naming the call, file and line when `status` is not cudaSuccess.
void check_status(int status, const char* expression, const char* file, int line);

int device_count();
bool is_available();
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

}  // namespace tessera::cuda

#define TS_CUDA_CHECK(expression) \
  ::tessera::cuda::check_status(static_cast<int>(expression), #expression, __FILE__, __LINE__)
