#include "tessera/tensor/cuda/check.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "tessera/config.h"

#if TESSERA_HAS_CUDNN
#include <cudnn.h>
#endif

namespace tessera::cuda {

namespace {

// Errors raised by an earlier asynchronous kernel surface at whichever call comes next.
bool is_asynchronous_fault(cudaError_t status) {
  switch (status) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction:
    case cudaErrorHardwareStackError:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
      return true;
    default:
      return false;
  }
}

}  // namespace

void check_status(int status, const char* expression, const char* file, int line) {
  if (status == cudaSuccess) return;
  auto error = static_cast<cudaError_t>(status);
  throw CudaError(detail::concat(
      expression, " failed at ", file, ":", line, ": ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")",
      is_asynchronous_fault(error)
          ? "; this fault may come from an earlier kernel (run with CUDA_LAUNCH_BLOCKING=1 to find it)"
          : ""));
}

void check_cublas_status(int status, const char* expression, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  auto error = static_cast<cublasStatus_t>(status);
  throw CudaError(detail::concat(expression, " failed at ", file, ":", line, ": ", cublasGetStatusName(error), " (",
                                 cublasGetStatusString(error), ")"));
}

void check_cudnn_status(int status, const char* expression, const char* file, int line) {
#if TESSERA_HAS_CUDNN
  if (status == CUDNN_STATUS_SUCCESS) return;
  char details[512] = {0};
  cudnnGetLastErrorString(details, sizeof details);
  throw CudaError(detail::concat(expression, " failed at ", file, ":", line, ": ",
                                 cudnnGetErrorString(static_cast<cudnnStatus_t>(status)),
                                 details[0] != '\0' ? " (" : "", details, details[0] != '\0' ? ")" : ""));
#else
  if (status == 0) return;
  throw CudaError(detail::concat(expression, " failed at ", file, ":", line, ": cuDNN status ", status));
#endif
}

}  // namespace tessera::cuda
