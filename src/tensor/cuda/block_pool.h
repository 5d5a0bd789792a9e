// BlockPool: the bookkeeping of a caching allocator, without CUDA, so that it is tested on
// any machine (tests/tensor/test_block_pool.cpp). The CUDA device allocator
// (cuda_allocator.cpp) and the pinned staging memory (host_copy.cpp) are both one of these
// over their own memory source.
//
// Memory comes from the source in segments (one cudaMalloc each) and is handed out in
// blocks carved from them, as PyTorch's CUDACachingAllocator does:
//  - requests up to 1 MiB share 2 MiB segments ("small" pool); larger ones get a segment
//    of 20 MiB below 10 MiB, else their size rounded up to 2 MiB ("large" pool), so that
//    a training step's varying sizes reuse memory instead of asking the driver again;
//  - a free block bigger than a request is split (the rest stays free: at least 512 bytes
//    in the small pool, more than 1 MiB in the large one, so large blocks do not shatter);
//  - a freed block merges with free neighbours in its segment; best fit (the smallest free
//    block that is large enough, the lowest address among equals) picks the block;
//  - a block used by another stream than the one it was allocated for (record_use) is
//    not reused when freed until that use is done: the source is asked for a PendingUse
//    at the free (an event recorded on that stream), which every allocation polls; it is
//    waited on only when memory runs short.
// Blocks are aligned to 512 bytes. Not thread-safe: the owner holds a lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

namespace tessera::cuda {

// One outstanding use of a freed block by another stream. Neither call may throw (a
// device fault counts as done: it surfaces at the next checked CUDA call).
class PendingUse {
 public:
  virtual ~PendingUse() = default;
  virtual bool done() = 0;  // polled: has that stream's work up to the free finished?
  virtual void wait() = 0;  // waits for it (only when memory runs short)
};

// Where a pool's memory comes from.
class MemorySource {
 public:
  virtual ~MemorySource() = default;
  // A new segment of `bytes`, or null when the source has no more.
  virtual void* allocate_segment(size_t bytes) = 0;
  virtual void free_segment(void* segment, size_t bytes) = 0;
  // The pending use, by `stream`, of a block freed now. Must not throw (frees happen in
  // destructors).
  virtual std::unique_ptr<PendingUse> pending_use(void* stream) = 0;
};

struct BlockPoolFigures {
  int64_t segment_allocations = 0;  // allocate_segment calls that succeeded
  int64_t segment_frees = 0;
  int64_t reserved_bytes = 0;  // in segments now
  int64_t cached_bytes = 0;    // in free blocks (and freed blocks awaiting a pending use)
  int64_t allocated_bytes = 0; // in blocks handed out (rounded sizes)
};

class BlockPool {
 public:
  static constexpr size_t kAlignment = 512;
  static constexpr size_t kSmallRequest = size_t{1} << 20;      // up to this: the small pool
  static constexpr size_t kSmallSegment = size_t{2} << 20;
  static constexpr size_t kLargeSegment = size_t{20} << 20;     // for requests below kMinLargeSegment
  static constexpr size_t kMinLargeSegment = size_t{10} << 20;
  static constexpr size_t kSegmentRounding = size_t{2} << 20;

  explicit BlockPool(MemorySource& source) : source_(source) {}
  ~BlockPool();  // returns every segment to the source (blocks still handed out included)
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A block of at least `bytes` (> 0), or null when the source refuses even after waiting
  // for pending uses and returning the free segments.
  void* allocate(size_t bytes);
  // Returns a block from allocate(); it is reusable at once unless record_use named
  // other streams since it was handed out.
  void deallocate(void* block);
  // The block is being used by `stream` too: when freed, it waits for that use.
  void record_use(void* block, void* stream);
  // Returns the segments that are wholly free to the source (pending uses are polled
  // first; with `wait_pending`, waited for).
  void release_free_segments(bool wait_pending = false);
  // The block's usable size (its request rounded up), for the caller's bookkeeping.
  size_t block_size(void* block) const;

  const BlockPoolFigures& figures() const { return figures_; }
  static size_t rounded(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }
  static size_t segment_size_for(size_t rounded_bytes);

 private:
  struct Block {
    char* address = nullptr;
    size_t size = 0;
    bool small = false;
    bool allocated = false;
    Block* previous = nullptr;  // neighbours within the segment
    Block* next = nullptr;
    std::vector<void*> streams;  // other streams that used it (record_use)
    std::vector<std::unique_ptr<PendingUse>> pending;
  };
  struct BySize {
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->address < b->address;
    }
  };
  using FreeSet = std::set<Block*, BySize>;

  FreeSet& free_set(bool small) { return small ? free_small_ : free_large_; }
  Block* take_free(size_t size, bool small);
  Block* new_segment(size_t size, bool small);
  Block* split(Block* block, size_t size);
  void make_free(Block* block);  // merges and files it
  void poll_pending(bool wait);
  void free_segment(Block* block);

  MemorySource& source_;
  FreeSet free_small_, free_large_;
  std::map<char*, Block*> allocated_;  // handed-out blocks by address
  std::vector<Block*> awaiting_;       // freed, waiting for pending uses
  std::set<Block*> segments_;          // the first block of every segment
  BlockPoolFigures figures_;
};

}  // namespace tessera::cuda
