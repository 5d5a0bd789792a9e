// The optimizer updates on CUDA (see optimizer_updates.h): one kernel per parameter and
// step, queued on the device's compute stream. Compiled with -fmad=false (cuda/meson.build):
// every multiply and add rounds on its own unless update_rules.h asks for an fma, as on the
// CPU. Grid-stride loops over the elements; nothing is launched for an empty parameter.
#include "tessera/tensor/cuda/cuda_runtime.h"
#include "tessera/tensor/cuda/launch.cuh"
#include "tessera/tensor/optimizer_updates.h"

namespace tessera::cuda {

using update_rules::AdadeltaScalars;
using update_rules::AdamScalars;
using update_rules::SgdScalars;

namespace {

template <class T>
__global__ void sgd_kernel(int64_t n, T* param, const T* grad, T* buffer, SgdScalars<T> s) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    update_rules::sgd_element(param[i], grad[i], buffer != nullptr ? buffer + i : nullptr, s);
  }
}

template <class T>
__global__ void adam_kernel(int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq,
                            AdamScalars<T> s) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    update_rules::adam_element(param[i], grad[i], exp_avg[i], exp_avg_sq[i],
                               max_exp_avg_sq != nullptr ? max_exp_avg_sq + i : nullptr, s);
  }
}

template <class T>
__global__ void adadelta_kernel(int64_t n, T* param, const T* grad, T* square_avg, T* acc_delta,
                                AdadeltaScalars<T> s) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    update_rules::adadelta_element(param[i], grad[i], square_avg[i], acc_delta[i], s);
  }
}

}  // namespace

template <class T>
void sgd_update(int device, int64_t n, T* param, const T* grad, T* buffer, const SgdScalars<T>& scalars) {
  if (n == 0) return;
  DeviceGuard guard(device);
  sgd_kernel<T><<<blocks_for(n), kThreads, 0, compute_stream(device)>>>(n, param, grad, buffer,
                                                                                            scalars);
  TS_CUDA_CHECK_LAUNCH("sgd_kernel");
}

template <class T>
void adam_update(int device, int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq,
                      const AdamScalars<T>& scalars) {
  if (n == 0) return;
  DeviceGuard guard(device);
  adam_kernel<T><<<blocks_for(n), kThreads, 0, compute_stream(device)>>>(
      n, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, scalars);
  TS_CUDA_CHECK_LAUNCH("adam_kernel");
}

template <class T>
void adadelta_update(int device, int64_t n, T* param, const T* grad, T* square_avg, T* acc_delta,
                          const AdadeltaScalars<T>& scalars) {
  if (n == 0) return;
  DeviceGuard guard(device);
  adadelta_kernel<T><<<blocks_for(n), kThreads, 0, compute_stream(device)>>>(
      n, param, grad, square_avg, acc_delta, scalars);
  TS_CUDA_CHECK_LAUNCH("adadelta_kernel");
}

template void sgd_update<float>(int, int64_t, float*, const float*, float*, const SgdScalars<float>&);
template void sgd_update<double>(int, int64_t, double*, const double*, double*, const SgdScalars<double>&);
template void adam_update<float>(int, int64_t, float*, const float*, float*, float*, float*,
                                      const AdamScalars<float>&);
template void adam_update<double>(int, int64_t, double*, const double*, double*, double*, double*,
                                       const AdamScalars<double>&);
template void adadelta_update<float>(int, int64_t, float*, const float*, float*, float*,
                                          const AdadeltaScalars<float>&);
template void adadelta_update<double>(int, int64_t, double*, const double*, double*, double*,
                                           const AdadeltaScalars<double>&);

}  // namespace tessera::cuda
