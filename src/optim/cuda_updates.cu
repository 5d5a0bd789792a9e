// The optimizer kernels on CUDA (see cuda_updates.h). Compiled with -fmad=false (optim's
// meson.build): every multiply and add rounds on its own unless update_rules.h asks for
// an fma, as on the CPU. Grid-stride loops over the elements; nothing is launched for an
// empty parameter.
#include "tessera/optim/cuda_updates.h"
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/launch.cuh"

namespace tessera::optim::detail {

namespace {

template <class T>
__global__ void sgd_kernel(int64_t n, T* param, const T* grad, T* buffer, SgdScalars<T> s) {
  for (int64_t i = cuda::thread_index(); i < n; i += cuda::thread_count()) {
    sgd_element(param[i], grad[i], buffer != nullptr ? buffer + i : nullptr, s);
  }
}

template <class T>
__global__ void adam_kernel(int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq,
                            AdamScalars<T> s) {
  for (int64_t i = cuda::thread_index(); i < n; i += cuda::thread_count()) {
    adam_element(param[i], grad[i], exp_avg[i], exp_avg_sq[i], max_exp_avg_sq != nullptr ? max_exp_avg_sq + i : nullptr,
                 s);
  }
}

template <class T>
__global__ void adadelta_kernel(int64_t n, T* param, const T* grad, T* square_avg, T* acc_delta,
                                AdadeltaScalars<T> s) {
  for (int64_t i = cuda::thread_index(); i < n; i += cuda::thread_count()) {
    adadelta_element(param[i], grad[i], square_avg[i], acc_delta[i], s);
  }
}

}  // namespace

template <class T>
void cuda_sgd_update(int device, int64_t n, T* param, const T* grad, T* buffer, const SgdScalars<T>& scalars) {
  if (n == 0) return;
  cuda::DeviceGuard guard(device);
  sgd_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::compute_stream(device)>>>(n, param, grad, buffer,
                                                                                            scalars);
  TS_CUDA_CHECK_LAUNCH("sgd_kernel");
}

template <class T>
void cuda_adam_update(int device, int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq,
                      const AdamScalars<T>& scalars) {
  if (n == 0) return;
  cuda::DeviceGuard guard(device);
  adam_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::compute_stream(device)>>>(
      n, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, scalars);
  TS_CUDA_CHECK_LAUNCH("adam_kernel");
}

template <class T>
void cuda_adadelta_update(int device, int64_t n, T* param, const T* grad, T* square_avg, T* acc_delta,
                          const AdadeltaScalars<T>& scalars) {
  if (n == 0) return;
  cuda::DeviceGuard guard(device);
  adadelta_kernel<T><<<cuda::blocks_for(n), cuda::kThreads, 0, cuda::compute_stream(device)>>>(
      n, param, grad, square_avg, acc_delta, scalars);
  TS_CUDA_CHECK_LAUNCH("adadelta_kernel");
}

template void cuda_sgd_update<float>(int, int64_t, float*, const float*, float*, const SgdScalars<float>&);
template void cuda_sgd_update<double>(int, int64_t, double*, const double*, double*, const SgdScalars<double>&);
template void cuda_adam_update<float>(int, int64_t, float*, const float*, float*, float*, float*,
                                      const AdamScalars<float>&);
template void cuda_adam_update<double>(int, int64_t, double*, const double*, double*, double*, double*,
                                       const AdamScalars<double>&);
template void cuda_adadelta_update<float>(int, int64_t, float*, const float*, float*, float*,
                                          const AdadeltaScalars<float>&);
template void cuda_adadelta_update<double>(int, int64_t, double*, const double*, double*, double*,
                                           const AdadeltaScalars<double>&);

}  // namespace tessera::optim::detail
