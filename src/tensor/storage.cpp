#include "tessera/tensor/storage.h"

#include <cstring>
#include <vector>

#include "tessera/tensor/allocator.h"
#include "tessera/tensor/error.h"

namespace tessera {

Storage::Storage(size_t nbytes, Device device) : device_(device) { resize(nbytes); }

Storage::Storage(size_t nbytes, Device device, PendingInit pending)
    : nbytes_(nbytes), device_(device), pending_(std::move(pending)) {}

Storage::Storage(size_t nbytes, Device device, bool pinned) : device_(device), pinned_(pinned) {
  TS_CHECK(!pinned || device.is_cpu(), DeviceError, "only host memory can be pinned, not ", device.str(), " memory");
  resize(nbytes);
}

Storage::~Storage() {
  if (data_ != nullptr && !borrowed_from_) allocator().deallocate(data_, nbytes_);
}

Allocator& Storage::allocator() const { return pinned_ ? pinned_host_allocator() : allocator_for(device_); }

void Storage::resize(size_t nbytes) {
  Allocator& allocator = this->allocator();
  if (data_ != nullptr && !borrowed_from_) allocator.deallocate(data_, nbytes_);
  borrowed_from_.reset();
  data_ = nullptr;
  nbytes_ = 0;
  pending_.reset();
  data_ = allocator.allocate(nbytes);
  nbytes_ = nbytes;
}

void Storage::borrow(std::shared_ptr<Storage> owner) {
  TS_CHECK(owner != nullptr && owner.get() != this, ValueError, "Storage::borrow: needs another storage");
  TS_CHECK(owner->device() == device_ && owner->pinned() == pinned_, DeviceError, "Storage::borrow: the owner is ",
           owner->device().str(), " memory, this storage ", device_.str());
  resize(0);
  data_ = owner->data();
  nbytes_ = owner->nbytes();
  borrowed_from_ = std::move(owner);
}

void Storage::materialize() {
  if (!pending_) return;
  PendingInit pending = std::move(*pending_);
  size_t nbytes = nbytes_;
  resize(nbytes);
  int64_t count = static_cast<int64_t>(nbytes / element_size(pending.dtype));
  if (device_.is_cpu()) {
    pending.rule.fill(data_, pending.dtype, count, pending.seed, pending.key, 0);
  } else {
    std::vector<unsigned char> host(nbytes);
    pending.rule.fill(host.data(), pending.dtype, count, pending.seed, pending.key, 0);
    copy_bytes(data_, device_, host.data(), Device::cpu(), nbytes);
  }
}

}  // namespace tessera
