// A block of device memory shared by a tensor and its views.
//
// A storage may be deferred: it knows its size and the InitRule that fills it but holds
// no bytes until data() is first asked for. Modules create their parameters this way, so
// that a parameter's values can be keyed by its full dotted name (known only once the
// module tree is built) and so that FSDP can fill each rank's shard without ever
// allocating the full parameter.
//
// A host storage may be pinned (page-locked: pinned_host_allocator() in allocator.h): the
// device's DMA engines then copy straight to and from it, with no staging copy, and a copy
// to the device can run while the host goes on (HostSide::pinned_non_blocking below).
// Tensor::pin_memory() makes one, FSDP's CPU offload keeps its shards in them.
//
// resize() exists for FSDP too: a unit's unsharded buffer is released after forward
// (resize(0)) and re-gathered into the same Storage before backward, so tensors that
// autograd saved during forward see the gathered values again.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "tessera/tensor/device.h"
#include "tessera/tensor/random.h"

namespace tessera {
class Allocator;
}

namespace tessera {

struct PendingInit {
  InitRule rule;
  DType dtype = DType::f32;
  std::string key;   // the stream name: the parameter's dotted name
  uint64_t seed = 0;
};

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  Storage(size_t nbytes, Device device, PendingInit pending);  // deferred
  // Host memory from the pinned allocator (`pinned` true; `device` must be the CPU).
  Storage(size_t nbytes, Device device, bool pinned);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // The bytes; a deferred storage is allocated and filled first.
  void* data() {
    if (pending_) materialize();
    return data_;
  }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }

  bool is_deferred() const { return pending_.has_value(); }
  // The rule a deferred storage will be filled with; null once materialised.
  PendingInit* pending() { return pending_ ? &*pending_ : nullptr; }
  void materialize();
  // Forgets the pending rule without allocating (FSDP fills shards itself).
  void drop_pending() { pending_.reset(); }

  // Releases the current bytes and allocates `nbytes` new ones; the contents are lost.
  // resize(0) frees the memory while keeping the object (and every view of it) alive.
  // A storage that borrows (below) stops borrowing instead of freeing.
  void resize(size_t nbytes);
  // Shows `owner`'s bytes (no copy, no allocation) until the next resize(): FSDP's units
  // over one rank, whose shard is the whole flat parameter, "gather" by borrowing it and
  // "release" by resize(0), so that their parameters are readable exactly when they are
  // at N ranks. `owner` is kept alive meanwhile and must not be resized.
  void borrow(std::shared_ptr<Storage> owner);
  bool borrowing() const { return borrowed_from_ != nullptr; }
  // What an error says when a tensor of this storage is read while it has no memory
  // (FSDP names the unit and its parameters).
  void set_released_note(std::string note) { released_note_ = std::move(note); }
  const std::string& released_note() const { return released_note_; }

 private:
  Allocator& allocator() const;

  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool pinned_ = false;
  std::optional<PendingInit> pending_;
  std::string released_note_;
  std::shared_ptr<Storage> borrowed_from_;  // set while data_ is its bytes, not ours
};

// How a copy between the host and a device may treat its host side.
enum class HostSide {
  pageable,  // any host memory: staged through the runtime's pinned buffers
  pinned,    // pinned memory: transferred directly; done (both ways) when the call returns
  // Pinned memory, host to device: queued on the device's compute stream and not waited
  // for (torch's non_blocking=True). The host bytes must not change until the device has
  // run the copy (any later host wait on that stream, e.g. a copy back, ensures it).
  pinned_non_blocking,
};

// Copies raw bytes between devices (host <-> CUDA goes through the CUDA runtime).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                HostSide host = HostSide::pageable);

}  // namespace tessera
