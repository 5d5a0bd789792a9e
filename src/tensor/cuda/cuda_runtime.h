// The CUDA runtime seam inside Tessera: status checks, the current-device guard and raw
// copies between host and device. Compiled only when Tessera is built with CUDA
// (TESSERA_HAS_CUDA); users see cuda_api.h instead.
#pragma once

#include <cstddef>
#include <string_view>

#include "tessera/tensor/cuda/check.h"
#include "tessera/tensor/cuda_api.h"
#include "tessera/tensor/device.h"
#include "tessera/tensor/device_check.h"
#include "tessera/tensor/storage.h"

namespace tessera::cuda {

// Makes `device` current for this host thread for the guard's lifetime, then restores
// the previous one if that device has a context (a thread that never used another device
// is left on this one, so no context is ever created on a GPU the program does not use).
// Every entry point that touches a device holds one, so a program with tensors on several
// GPUs never issues work against the wrong one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  explicit DeviceGuard(Device device) : DeviceGuard(device.index) {}
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int current_ = -1;
};

// A CUDA kernel entry's first step once its operands are checked: `tensor` must be a CUDA
// tensor (check_cuda's DeviceError, naming `op`), and its device is current while the
// returned guard lives (`DeviceGuard guard = enter_cuda_device(self, op);`; the guard is
// neither copied nor moved: C++17 builds it in place).
[[nodiscard]] inline DeviceGuard enter_cuda_device(const Tensor& tensor, std::string_view op) {
  check_cuda(tensor, op);
  return DeviceGuard(tensor.device());
}

// True when `device`'s primary context exists (some thread has used the device).
bool has_primary_context(int device);

// Throws DeviceError unless `device` names a visible device.
void check_device_index(int device);

// Copies raw bytes where at least one side is a CUDA device (see host_copy.cpp): ordered
// on the devices' compute streams; a copy to the host has finished when this returns, a
// copy from the host may still be in flight (its source has already been staged, or is
// pinned memory the caller keeps unchanged: HostSide::pinned_non_blocking).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes, HostSide host);

}  // namespace tessera::cuda
