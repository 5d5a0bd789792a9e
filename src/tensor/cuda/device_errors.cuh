// Reporting bad input from a kernel (see device_error_record.h): the first report on a
// device wins until the host has raised it; later ones are dropped.
//
//   if (cls < 0 || cls >= classes) report_device_error(slot, DeviceErrorCode::nll_loss_target, cls, n, classes);
//
// "The first bad position" of a multi-block launch, as the CPU reports it: every block
// notes its bad positions in a FirstBadScratch (device_errors.h), and the last block to
// finish reports the smallest and resets the scratch for the next launch:
//
//   if (bad) note_bad_position(scratch, p);
//   finish_bad_positions(scratch, [&](int64_t first) { report_device_error(..., index[first], first, ...); });
#pragma once

#include "tessera/tensor/cuda/device_error_record.h"
#include "tessera/tensor/cuda/device_errors.h"

namespace tessera::cuda {

__device__ __forceinline__ void report_device_error(DeviceErrorRecord* slot, DeviceErrorCode code, int64_t a,
                                                    int64_t b, int64_t c, uint64_t context = 0) {
  auto* claim = reinterpret_cast<unsigned long long*>(&slot->code);
  if (atomicCAS(claim, 0ull, ~0ull) != 0ull) return;  // another report is pending
  slot->values[0] = a;
  slot->values[1] = b;
  slot->values[2] = c;
  slot->context = context;
  __threadfence_system();
  *reinterpret_cast<volatile unsigned long long*>(claim) = static_cast<unsigned long long>(code);
}

__device__ __forceinline__ void note_bad_position(FirstBadScratch* scratch, int64_t position) {
  atomicMin(&scratch->position, static_cast<unsigned long long>(position));
}

// Every thread of every block calls it once, after its last note_bad_position.
template <class Report>
__device__ void finish_bad_positions(FirstBadScratch* scratch, Report report) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  __threadfence();  // this block's notes are visible before it counts itself done
  if (atomicAdd(&scratch->blocks_done, 1u) != gridDim.x - 1) return;
  const unsigned long long first = atomicExch(&scratch->position, ~0ull);  // read and reset
  atomicExch(&scratch->blocks_done, 0u);
  if (first != ~0ull) report(static_cast<int64_t>(first));
}

}  // namespace tessera::cuda
