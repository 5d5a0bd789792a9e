// The optimizer updates on CUDA: one kernel per parameter and step, each thread applying
// update_rules.h's element function to its elements (so the device computes exactly the
// CPU's expressions), queued on the device's compute stream. Compiled only with CUDA;
// pointers are device pointers to `n` contiguous elements.
#pragma once

#include <cstdint>

#include "tessera/optim/update_rules.h"

namespace tessera::optim::detail {

template <class T>
void cuda_sgd_update(int device, int64_t n, T* param, const T* grad, T* buffer, const SgdScalars<T>& scalars);

template <class T>
void cuda_adam_update(int device, int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq,
                      const AdamScalars<T>& scalars);

template <class T>
void cuda_adadelta_update(int device, int64_t n, T* param, const T* grad, T* square_avg, T* acc_delta,
                          const AdadeltaScalars<T>& scalars);

}  // namespace tessera::optim::detail
