// The optimizers' fused updates, one call per parameter and step: native::*_update picks
// the backend by the device (native_dispatch.cpp), cpu:: and cuda:: hold the loops and
// kernels, and update_rules.h the arithmetic both evaluate. Pointers are to `n`
// contiguous elements on `device` (buffer / max_exp_avg_sq may be null where the
// scalars say they are unused). Internal, not installed.
#pragma once

#include <cstdint>

#include "tessera/tensor/device.h"
#include "tessera/tensor/update_rules.h"

namespace tessera::native {

template <class T>
void sgd_update(Device device, int64_t n, T* param, const T* grad, T* buffer, const update_rules::SgdScalars<T>& s);

template <class T>
void adam_update(Device device, int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* max_exp_avg_sq,
                 const update_rules::AdamScalars<T>& s);

template <class T>
void adadelta_update(Device device, int64_t n, T* param, const T* grad, T* square_avg, T* acc_delta,
                     const update_rules::AdadeltaScalars<T>& s);

}  // namespace tessera::native

// The backends' bodies, instantiated for float and double.
namespace tessera::cpu {
#include "tessera/tensor/optimizer_update_kernels.inc"
}  // namespace tessera::cpu

namespace tessera::cuda {
#include "tessera/tensor/optimizer_update_kernels.inc"
}  // namespace tessera::cuda
