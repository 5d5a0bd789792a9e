#include "tessera/tensor/cuda/handles.h"

#include <map>
#include <memory>

#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/stream.h"

namespace tessera::cuda {

namespace {

// Handles live until the process exits: destroying them at static destruction would
// race the libraries' own teardown.
template <class Handle>
struct PerDevice {
  std::mutex mutex;
  std::map<int, Handle> handles;
};

}  // namespace

cublasHandle_t cublas_handle(int device) {
  static auto* all = new PerDevice<cublasHandle_t>();
  std::lock_guard<std::mutex> lock(all->mutex);
  auto it = all->handles.find(device);
  if (it != all->handles.end()) return it->second;
  DeviceGuard guard(device);
  cublasHandle_t handle = nullptr;
  TS_CUBLAS_CHECK(cublasCreate(&handle));
  TS_CUBLAS_CHECK(cublasSetStream(handle, compute_stream(device)));
  // No tensor-core shortcuts unless a call asks for them (CUBLAS_COMPUTE_32F_FAST_TF32).
  TS_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
  all->handles.emplace(device, handle);
  return handle;
}

#if TESSERA_HAS_CUDNN
namespace {
struct CudnnSlot {
  cudnnHandle_t handle = nullptr;
  std::mutex in_use;
};
}  // namespace

CudnnLease cudnn_handle(int device) {
  static auto* all = new PerDevice<std::unique_ptr<CudnnSlot>>();
  CudnnSlot* slot = nullptr;
  {
    std::lock_guard<std::mutex> lock(all->mutex);
    auto& entry = all->handles[device];
    if (!entry) {
      DeviceGuard guard(device);
      auto created = std::make_unique<CudnnSlot>();
      TS_CUDNN_CHECK(cudnnCreate(&created->handle));
      TS_CUDNN_CHECK(cudnnSetStream(created->handle, compute_stream(device)));
      entry = std::move(created);
    }
    slot = entry.get();
  }
  return {slot->handle, std::unique_lock<std::mutex>(slot->in_use)};
}
#endif

}  // namespace tessera::cuda
