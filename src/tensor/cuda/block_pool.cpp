#include "tessera/tensor/cuda/block_pool.h"

#include <algorithm>

#include "tessera/tensor/error.h"

namespace tessera::cuda {

BlockPool::~BlockPool() {
  std::vector<Block*> heads(segments_.begin(), segments_.end());
  for (Block* head : heads) {
    size_t bytes = 0;
    for (Block* b = head; b != nullptr; b = b->next) bytes += b->size;
    source_.free_segment(head->address, bytes);
    for (Block* b = head; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

size_t BlockPool::segment_size_for(size_t rounded_bytes) {
  if (rounded_bytes <= kSmallRequest) return kSmallSegment;
  if (rounded_bytes < kMinLargeSegment) return kLargeSegment;
  return (rounded_bytes + kSegmentRounding - 1) / kSegmentRounding * kSegmentRounding;
}

void* BlockPool::allocate(size_t bytes) {
  TS_CHECK(bytes > 0, ValueError, "BlockPool::allocate: zero bytes");
  const size_t size = rounded(bytes);
  const bool small = size <= kSmallRequest;
  if (!awaiting_.empty()) poll_pending(false);  // blocks whose other-stream uses are done are free again
  Block* block = take_free(size, small);
  if (block == nullptr) block = new_segment(segment_size_for(size), small);
  if (block == nullptr) {  // short of memory: wait for what other streams still use, then return free segments
    poll_pending(true);
    block = take_free(size, small);
    if (block == nullptr) {
      release_free_segments();
      block = new_segment(segment_size_for(size), small);
    }
  }
  if (block == nullptr) return nullptr;
  const size_t rest = block->size - size;
  if (small ? rest >= kAlignment : rest > kSmallRequest) split(block, size);
  block->allocated = true;
  allocated_[block->address] = block;
  figures_.allocated_bytes += static_cast<int64_t>(block->size);
  figures_.cached_bytes -= static_cast<int64_t>(block->size);
  return block->address;
}

void BlockPool::deallocate(void* pointer) {
  auto it = allocated_.find(static_cast<char*>(pointer));
  TS_CHECK(it != allocated_.end(), ValueError, "BlockPool::deallocate: not a block of this pool");
  Block* block = it->second;
  allocated_.erase(it);
  block->allocated = false;
  figures_.allocated_bytes -= static_cast<int64_t>(block->size);
  figures_.cached_bytes += static_cast<int64_t>(block->size);
  if (block->streams.empty()) {
    make_free(block);
    return;
  }
  for (void* stream : block->streams) block->pending.push_back(source_.pending_use(stream));
  block->streams.clear();
  awaiting_.push_back(block);
}

void BlockPool::record_use(void* pointer, void* stream) {
  auto it = allocated_.find(static_cast<char*>(pointer));
  TS_CHECK(it != allocated_.end(), ValueError, "BlockPool::record_use: not a block of this pool");
  std::vector<void*>& streams = it->second->streams;
  if (std::find(streams.begin(), streams.end(), stream) == streams.end()) streams.push_back(stream);
}

size_t BlockPool::block_size(void* pointer) const {
  auto it = allocated_.find(static_cast<char*>(pointer));
  TS_CHECK(it != allocated_.end(), ValueError, "BlockPool::block_size: not a block of this pool");
  return it->second->size;
}

void BlockPool::release_free_segments(bool wait_pending) {
  poll_pending(wait_pending);
  std::vector<Block*> wholly_free;
  for (Block* head : segments_) {
    if (!head->allocated && head->pending.empty() && head->next == nullptr) wholly_free.push_back(head);
  }
  for (Block* head : wholly_free) free_segment(head);
}

BlockPool::Block* BlockPool::take_free(size_t size, bool small) {
  FreeSet& set = free_set(small);
  Block key;
  key.size = size;
  key.address = nullptr;
  auto it = set.lower_bound(&key);  // the smallest that fits, lowest address first
  if (it == set.end()) return nullptr;
  Block* block = *it;
  set.erase(it);
  return block;
}

BlockPool::Block* BlockPool::new_segment(size_t size, bool small) {
  void* memory = source_.allocate_segment(size);
  if (memory == nullptr) return nullptr;
  auto* block = new Block;
  block->address = static_cast<char*>(memory);
  block->size = size;
  block->small = small;
  segments_.insert(block);
  ++figures_.segment_allocations;
  figures_.reserved_bytes += static_cast<int64_t>(size);
  figures_.cached_bytes += static_cast<int64_t>(size);
  return block;
}

BlockPool::Block* BlockPool::split(Block* block, size_t size) {
  auto* rest = new Block;
  rest->address = block->address + size;
  rest->size = block->size - size;
  rest->small = block->small;
  rest->previous = block;
  rest->next = block->next;
  if (block->next != nullptr) block->next->previous = rest;
  block->next = rest;
  block->size = size;
  free_set(rest->small).insert(rest);
  return rest;
}

void BlockPool::make_free(Block* block) {
  FreeSet& set = free_set(block->small);
  for (Block* neighbour : {block->previous, block->next}) {
    if (neighbour == nullptr || neighbour->allocated || !neighbour->pending.empty()) continue;
    set.erase(neighbour);
    Block* first = neighbour == block->previous ? neighbour : block;
    Block* second = first == block ? neighbour : block;
    first->size += second->size;
    first->next = second->next;
    if (second->next != nullptr) second->next->previous = first;
    delete second;
    block = first;
  }
  set.insert(block);
}

void BlockPool::poll_pending(bool wait) {
  std::vector<Block*> still;
  for (Block* block : awaiting_) {
    auto& pending = block->pending;
    if (wait) {
      for (auto& use : pending) use->wait();
      pending.clear();
    } else {
      pending.erase(std::remove_if(pending.begin(), pending.end(), [](auto& use) { return use->done(); }),
                    pending.end());
    }
    if (pending.empty()) {
      make_free(block);
    } else {
      still.push_back(block);
    }
  }
  awaiting_ = std::move(still);
}

void BlockPool::free_segment(Block* head) {
  free_set(head->small).erase(head);
  segments_.erase(head);
  source_.free_segment(head->address, head->size);
  ++figures_.segment_frees;
  figures_.reserved_bytes -= static_cast<int64_t>(head->size);
  figures_.cached_bytes -= static_cast<int64_t>(head->size);
  delete head;
}

}  // namespace tessera::cuda
