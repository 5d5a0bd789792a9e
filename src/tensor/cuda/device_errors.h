// Errors found after the host moved on, raised at the device's next host wait: records
// written by kernels (device_error_record.h) and errors posted by other threads for a
// device (the NCCL watchdog's, when it aborted a communicator whose work the device was
// waiting for). stream.h's waits call raise_device_errors(); kernels report through
// device_errors.cuh.
#pragma once

#include <exception>

#include "tessera/tensor/cuda/device_error_record.h"

namespace tessera::cuda {

// The device's record slot as kernels address it (mapped pinned host memory, created on
// first use). Pass it to a kernel that may report.
DeviceErrorRecord* device_error_slot(int device);
// After a host wait on `device`: throws the kernel record or the posted error, if any, and
// clears it (so the device goes on being usable).
void raise_device_errors(int device);
// Makes the next host wait on `device` throw `error` (from any thread).
void post_device_error(int device, std::exception_ptr error);

// Registers what a launch's report would need in its message; pass the id to the kernel.
// The last few thousand are kept (a report older than that says less).
uint64_t register_error_context(int device, DeviceErrorContext context);

// Device scratch for "the first bad position" across the blocks of one launch (see
// device_errors.cuh): {position = ~0, blocks_done = 0}, reset by the launch that used it.
// One per device, for kernels on its compute stream (which run one after another).
struct FirstBadScratch {
  unsigned long long position;
  unsigned int blocks_done;
};
FirstBadScratch* first_bad_scratch(int device);

}  // namespace tessera::cuda
