// cuBLAS and cuDNN handles, one per device, created on first use and bound to the
// device's compute stream (so library calls run in order with Tessera's own kernels).
#pragma once

#include <cublas_v2.h>

#include <mutex>

#include "tessera/config.h"

#if TESSERA_HAS_CUDNN
#include <cudnn.h>
#endif

namespace tessera::cuda {

// Safe to use from several host threads: Tessera never changes a handle's settings after
// creating it (TF32 is chosen per call through the compute type).
cublasHandle_t cublas_handle(int device);

#if TESSERA_HAS_CUDNN
// A cuDNN handle must not be used by two host threads at once; the lease holds its lock.
struct CudnnLease {
  cudnnHandle_t handle;
  std::unique_lock<std::mutex> lock;
};
CudnnLease cudnn_handle(int device);
#endif

}  // namespace tessera::cuda
