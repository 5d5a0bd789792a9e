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

// cuDNN's alpha = 1 and beta = 0 (overwrite the output), in the type the call expects:
// double for float64 data, float otherwise.
struct CudnnScalars {
  float alpha_f = 1.0f, beta_f = 0.0f;
  double alpha_d = 1.0, beta_d = 0.0;
  bool use_double;
  const void* alpha() const { return use_double ? static_cast<const void*>(&alpha_d) : &alpha_f; }
  const void* beta() const { return use_double ? static_cast<const void*>(&beta_d) : &beta_f; }
};
#endif

}  // namespace tessera::cuda
