// Status checks for the CUDA runtime, cuBLAS and cuDNN: a failing call throws CudaError
// naming the call (its source text), the file and the line, and the library's own words
// for the status. Nothing here aborts. The header needs no CUDA headers, so any file can
// use the macros; the status is passed as an int and decoded in check.cpp.
//
//   TS_CUDA_CHECK(cudaMemsetAsync(data, 0, nbytes, stream));
//   TS_CUBLAS_CHECK(cublasSetStream(handle, stream));
//   TS_CUDNN_CHECK(cudnnSoftmaxForward(...));
#pragma once

#include "tessera/tensor/cuda_api.h"
#include "tessera/tensor/error.h"

namespace tessera::cuda {

void check_status(int status, const char* expression, const char* file, int line);
void check_cublas_status(int status, const char* expression, const char* file, int line);
void check_cudnn_status(int status, const char* expression, const char* file, int line);

}  // namespace tessera::cuda

#define TS_CUDA_CHECK(expression) \
  ::tessera::cuda::check_status(static_cast<int>(expression), #expression, __FILE__, __LINE__)
#define TS_CUBLAS_CHECK(expression) \
  ::tessera::cuda::check_cublas_status(static_cast<int>(expression), #expression, __FILE__, __LINE__)
#define TS_CUDNN_CHECK(expression) \
  ::tessera::cuda::check_cudnn_status(static_cast<int>(expression), #expression, __FILE__, __LINE__)
// After a kernel launch: a bad launch configuration is reported here, naming the kernel.
#define TS_CUDA_CHECK_LAUNCH(kernel_name) \
  ::tessera::cuda::check_status(static_cast<int>(cudaGetLastError()), "launch of " kernel_name, __FILE__, __LINE__)
