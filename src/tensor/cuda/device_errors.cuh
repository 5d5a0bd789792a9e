// Reporting bad input from a kernel (see device_error_record.h): the first report on a
// device wins until the host has raised it; later ones are dropped.
//
//   if (cls < 0 || cls >= classes) report_device_error(slot, DeviceErrorCode::nll_loss_target, cls, n, classes);
#pragma once

#include "tessera/tensor/cuda/device_error_record.h"

namespace tessera::cuda {

__device__ __forceinline__ void report_device_error(DeviceErrorRecord* slot, DeviceErrorCode code, int64_t a,
                                                    int64_t b, int64_t c) {
  auto* claim = reinterpret_cast<unsigned long long*>(&slot->code);
  if (atomicCAS(claim, 0ull, ~0ull) != 0ull) return;  // another report is pending
  slot->values[0] = a;
  slot->values[1] = b;
  slot->values[2] = c;
  __threadfence_system();
  *reinterpret_cast<volatile unsigned long long*>(claim) = static_cast<unsigned long long>(code);
}

}  // namespace tessera::cuda
