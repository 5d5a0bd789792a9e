// Memory limits: a device's allocator can be told never to hold more than so many bytes,
// as torch.cuda.set_per_process_memory_fraction does on a GPU. A request that would take
// it past the limit first makes the allocator give its cached free blocks back, and if it
// still does not fit, throws OutOfMemoryError naming the device, the request, the bytes in
// use, the limit and the largest holders that FSDP (or anything else that registered a
// MemoryHolderReport) knows of:
//
//   ts::set_memory_limit(ts::Device::cpu(), ts::parse_memory_size("2.5GiB"));
//   try { train(); } catch (const ts::OutOfMemoryError& e) { std::puts(e.what()); }
//
// The limit counts everything the allocator holds from the system: the blocks handed to
// live tensors and the freed blocks it caches for reuse (a CUDA allocator's whole
// segments, as PyTorch's reserved memory). So memory_stats(device).peak_bytes never
// exceeds it.
//
// A limit is process state, one per device (as PyTorch's fraction is): a test that sets
// one restores the previous one with a MemoryLimitGuard. TESSERA_MEMORY_LIMIT (e.g.
// "2.5GiB") sets the starting limit of every device's allocator.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/tensor/device.h"
#include "tessera/tensor/error.h"

namespace tessera {

// An allocation refused: over the device's memory limit, or the system has no more.
class OutOfMemoryError : public Error {
  using Error::Error;
};

// Sets `device`'s limit to `bytes` (> 0) and releases its cached blocks, so that what it
// holds is what tensors use. Bytes already in use above the limit stay; later requests fail.
void set_memory_limit(Device device, int64_t bytes);
// Removes `device`'s limit.
void clear_memory_limit(Device device);
// `device`'s limit, or nullopt when it has none.
std::optional<int64_t> memory_limit(Device device);

// Sets (or, with nullopt, clears) a limit for its lifetime, then restores the previous one.
class MemoryLimitGuard {
 public:
  MemoryLimitGuard(Device device, std::optional<int64_t> bytes);
  ~MemoryLimitGuard();
  MemoryLimitGuard(const MemoryLimitGuard&) = delete;
  MemoryLimitGuard& operator=(const MemoryLimitGuard&) = delete;

 private:
  Device device_;
  std::optional<int64_t> previous_;
};

// "2.5GiB" -> 2684354560. A decimal number (digits, an optional fraction; no sign, exponent
// or hexadecimal: "0x10" and "1e9" are refused) and an optional unit: B, KiB, MiB, GiB, TiB
// (powers of 1024) or kB, MB, GB, TB (powers of 1000), case-insensitive, with or without a
// space between. Throws ValueError naming `what` and the text otherwise.
int64_t parse_memory_size(std::string_view text, std::string_view what = "memory size");
// "2.50 GiB", "512.0 MiB", "100 bytes": how messages print byte counts.
std::string format_bytes(int64_t bytes);

// What the OutOfMemoryError message lists as the largest holders: a description
// ("parameter shard of FSDP unit 'transformer.h.3'") and its bytes on the device.
struct MemoryHolder {
  std::string what;
  int64_t bytes = 0;
};
using MemoryHolderReport = std::function<void(Device device, std::vector<MemoryHolder>& holders)>;

// Registers `report` for the lifetime of the object (FSDP keeps one per sharded model).
// A report runs while an allocation is being refused, possibly on another thread than the
// one that registered it: it must only read sizes and must not allocate tensors.
class MemoryHolderRegistration {
 public:
  explicit MemoryHolderRegistration(MemoryHolderReport report);
  ~MemoryHolderRegistration();
  MemoryHolderRegistration(const MemoryHolderRegistration&) = delete;
  MemoryHolderRegistration& operator=(const MemoryHolderRegistration&) = delete;

 private:
  int handle_;
};

namespace detail {
// The allocators' common refusal: throws OutOfMemoryError for a request of `request` bytes
// on `device`, where `in_use` bytes are held by tensors and `held` from the system.
[[noreturn]] void throw_over_limit(Device device, int64_t request, int64_t limit, int64_t in_use, int64_t held);
// TESSERA_MEMORY_LIMIT, parsed (nullopt when unset or empty).
std::optional<int64_t> memory_limit_from_environment();
}  // namespace detail

}  // namespace tessera
