// CPU offload's device boundary (FSDP2's CPUOffloadPolicy): a unit's shard and gradient
// shard live in host memory; these are the two copies across, and the wait that keeps the
// host from writing a shard the device is still reading.
//
// Host -> device: before each all-gather the shard is copied to a fresh device buffer
// (which the all-gather's Work keeps alive). From pinned memory the copy is queued on the
// compute stream and not waited for, so it overlaps the compute before it; the host must
// then not write the shard until the device has run it. FSDP's own writes (write-back,
// loading, the end of a full-precision summon) wait first, and backward ends with a wait
// when a copy may be in flight, so the optimizer's step after it is safe. Device -> host:
// after the reduce-scatter the reduced gradient shard is copied to the host and waited for
// (the optimizer reads it next).
//
// With the model on the CPU both sides are host memory, but distinct allocators (pinned vs
// the CPU's): the same code runs, and tests measure which bytes are where.
#include "tessera/fsdp/unit.h"
#include "tessera/tensor/cuda_api.h"
#include "tessera/tensor/native.h"
#include "tessera/tensor/storage.h"

namespace tessera::fsdp::detail {

Tensor Unit::shard_on_device(bool non_blocking) {
  Tensor source = shard_.detach();
  Tensor copy = native::empty(source.sizes(), source.dtype(), device_);
  HostSide host = HostSide::pageable;
  if (source.is_pinned()) host = non_blocking ? HostSide::pinned_non_blocking : HostSide::pinned;
  copy_bytes(copy.data_ptr(), device_, source.data_ptr(), Device::cpu(), source.nbytes(), host);
  if (host == HostSide::pinned_non_blocking && device_.is_cuda()) host_reads_in_flight_ = true;
  return copy;
}

Tensor Unit::to_host(const Tensor& on_device) const {
  Tensor source = native::contiguous(on_device);
  const bool pinned = offload_->pin_memory;
  Tensor host = pinned ? native::empty_pinned(source.sizes(), source.dtype())
                       : native::empty(source.sizes(), source.dtype(), Device::cpu());
  copy_bytes(host.data_ptr(), Device::cpu(), source.data_ptr(), device_, source.nbytes(),
             pinned ? HostSide::pinned : HostSide::pageable);
  return host;
}

bool Unit::host_reads_in_flight() const { return host_reads_in_flight_; }

void Unit::host_reads_done() { host_reads_in_flight_ = false; }

void Unit::wait_for_host_reads() {
  if (!host_reads_in_flight_) return;
  cuda::synchronize(device_.index);
  host_reads_in_flight_ = false;
}

}  // namespace tessera::fsdp::detail
