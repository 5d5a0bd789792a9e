#include "tessera/tensor/allocator.h"

#include <cstdlib>
#include <string_view>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "tessera/tensor/error.h"
#include "tessera/tensor/host_allocator.h"

namespace tessera {

Allocator::Allocator() : limit_(detail::memory_limit_from_environment().value_or(kNoLimit)) {}

void Allocator::set_limit(int64_t bytes) {
  limit_.store(bytes);
  release_cached();
}

MemoryStats Allocator::stats() const {
  return {current_.load(), peak_.load(), allocations_.load(), cached_.load(), reserved_bytes()};
}

void Allocator::reset_peak() { peak_.store(current_.load()); }

void Allocator::record_allocation(size_t nbytes) {
  int64_t now = current_.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
  int64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  allocations_.fetch_add(1);
}

void Allocator::record_deallocation(size_t nbytes) { current_.fetch_sub(static_cast<int64_t>(nbytes)); }

namespace {

using detail::HostMemorySource;

void* allocate_pageable(size_t alignment, size_t bytes) { return std::aligned_alloc(alignment, bytes); }
void free_pageable(void* block) { std::free(block); }

constexpr HostMemorySource kPageable{"host memory", allocate_pageable, free_pageable, true};

// 64-byte aligned host memory (a cache line and a full AVX-512 vector), with freed blocks
// kept per rounded size and handed out again. A step of a training loop asks for the same
// sizes every time, so after the first step it is served from the cache: no system call
// and, above all, no page faults on fresh multi-megabyte blocks (one per 4 KiB touched).
// The cache holds at most kCacheLimit bytes (more is freed at once) and is emptied when
// the system runs out of memory; TESSERA_CPU_CACHING=0 turns it off. The pinned host
// allocator is one of these over page-locked memory (for which caching matters more:
// cudaHostAlloc takes milliseconds).
class HostAllocator final : public Allocator {
 public:
  explicit HostAllocator(HostMemorySource source) : source_(source) {
    const char* setting = std::getenv("TESSERA_CPU_CACHING");
    caching_ = setting == nullptr || std::string_view(setting) != "0";
    if (!source_.limited) set_limit(kNoLimit);
  }
  ~HostAllocator() override { release_cached(); }

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    const size_t rounded = round_size(nbytes);
    void* data = take_cached(rounded);
    if (data == nullptr) data = allocate_from_system(nbytes, rounded);
    record_allocation(nbytes);
    return data;
  }

  void deallocate(void* data, size_t nbytes) override {
    if (data == nullptr) return;
    record_deallocation(nbytes);
    const size_t rounded = round_size(nbytes);
    if (caching_) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_total_ + rounded <= kCacheLimit) {
        free_blocks_[rounded].push_back(data);
        cached_total_ += rounded;
        record_cached(static_cast<int64_t>(rounded));
        return;
      }
    }
    source_.free(data);
    held_.fetch_sub(static_cast<int64_t>(rounded));
  }

  void release_cached() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, blocks] : free_blocks_) {
      for (void* block : blocks) source_.free(block);
      record_cached(-static_cast<int64_t>(size * blocks.size()));
      held_.fetch_sub(static_cast<int64_t>(size * blocks.size()));
    }
    free_blocks_.clear();
    cached_total_ = 0;
  }

  int64_t reserved_bytes() const override { return held_.load(); }

 private:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kPage = 4096;
  // Enough for a GPT-2 124M step at 8 x 256 tokens, whose 412 MB logits and their gradient
  // are freed and asked for again each step (1 GiB left them to the system: 1 s of page
  // faults in a 13 s step). A memory limit or a failed allocation empties it first.
  static constexpr size_t kCacheLimit = size_t{4} << 30;

  // Cache lines for small blocks, pages for large ones, so near-equal sizes share blocks.
  static size_t round_size(size_t nbytes) {
    const size_t unit = nbytes >= 16 * kPage ? kPage : kAlignment;
    return (nbytes + unit - 1) / unit * unit;
  }

  // A new block from the system. Under a memory limit the bytes held from the system
  // (live and cached blocks) must stay within it: the cache is given back first if that
  // makes room, else the request is refused.
  void* allocate_from_system(size_t nbytes, size_t rounded) {
    if (!reserve(rounded)) {
      release_cached();
      if (!reserve(rounded)) {
        detail::throw_over_limit(Device::cpu(), static_cast<int64_t>(nbytes), limit(), stats().current_bytes,
                                 held_.load());
      }
    }
    void* data = source_.allocate(kAlignment, rounded);
    if (data == nullptr) {
      release_cached();
      data = source_.allocate(kAlignment, rounded);
    }
    if (data == nullptr) {
      held_.fetch_sub(static_cast<int64_t>(rounded));
      throw OutOfMemoryError(detail::concat("out of ", source_.what, " allocating ", nbytes, " bytes (",
                                            format_bytes(static_cast<int64_t>(nbytes)), "); ",
                                            format_bytes(stats().current_bytes), " are in use by tensors"));
    }
    return data;
  }

  // Counts `rounded` more bytes held from the system, unless that exceeds the limit.
  bool reserve(size_t rounded) {
    const int64_t bytes = static_cast<int64_t>(rounded);
    const int64_t held = held_.fetch_add(bytes) + bytes;
    const int64_t cap = limit();
    if (cap == kNoLimit || held <= cap) return true;
    held_.fetch_sub(bytes);
    return false;
  }

  void* take_cached(size_t rounded) {
    if (!caching_) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_blocks_.find(rounded);
    if (it == free_blocks_.end() || it->second.empty()) return nullptr;
    void* data = it->second.back();
    it->second.pop_back();
    cached_total_ -= rounded;
    record_cached(-static_cast<int64_t>(rounded));
    return data;
  }

  HostMemorySource source_;
  bool caching_ = true;
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_blocks_;
  size_t cached_total_ = 0;
  std::atomic<int64_t> held_{0};  // from the system: live blocks and cached ones, rounded
};

}  // namespace

namespace detail {

Allocator& pageable_host_allocator() {
  static HostAllocator cpu_allocator(kPageable);
  return cpu_allocator;
}

Allocator* new_host_allocator(const HostMemorySource& source) { return new HostAllocator(source); }

HostMemorySource pageable_host_memory(const char* what, bool limited) {
  return {what, allocate_pageable, free_pageable, limited};
}

}  // namespace detail

}  // namespace tessera
