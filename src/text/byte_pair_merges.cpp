#include "tessera/text/byte_pair_merges.h"

#include <algorithm>
#include <climits>
#include <utility>

#include "tessera/tensor/error.h"

namespace tessera::text {

size_t BytePairMerges::slot_of(uint64_t k) const {
  // Fibonacci hashing spreads the (left, right) keys, whose halves are small integers.
  const size_t mask = slots_.size() - 1;
  size_t slot = static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 24) & mask;
  while (slots_[slot].key != kEmpty && slots_[slot].key != k) slot = (slot + 1) & mask;
  return slot;
}

void BytePairMerges::grow() {
  std::vector<Slot> old = std::exchange(slots_, std::vector<Slot>(std::max<size_t>(64, 2 * slots_.size())));
  for (const Slot& entry : old) {
    if (entry.key != kEmpty) slots_[slot_of(entry.key)] = entry;
  }
}

bool BytePairMerges::add(int32_t left, int32_t right, int32_t merged) {
  if (2 * (static_cast<size_t>(size_) + 1) > slots_.size()) grow();
  const uint64_t k = key(left, right);
  Slot& slot = slots_[slot_of(k)];
  if (slot.key == k) return false;
  slot = {k, {size_, merged}};
  ++size_;
  return true;
}

std::optional<MergeRule> BytePairMerges::find(int32_t left, int32_t right) const {
  if (size_ == 0) return std::nullopt;
  const uint64_t k = key(left, right);
  const Slot& slot = slots_[slot_of(k)];
  if (slot.key != k) return std::nullopt;
  return slot.rule;
}

namespace {

// A pair that may still be merged into `merged`: the tokens at `left` and the one after
// it, if they are still `left_token` and `right_token` when it comes off the heap.
struct Candidate {
  int32_t rank, left, left_token, right_token, merged;
};

// The heap's order: a candidate "comes later" with a higher rank, or further right at the
// same rank; std::push_heap keeps on top the one that comes first.
bool comes_later(const Candidate& a, const Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
}

// Scratch space reused by the calls on one thread (merge runs once per new piece).
struct Scratch {
  std::vector<int32_t> next, previous;
  std::vector<Candidate> heap, batch;
};

}  // namespace

void BytePairMerges::merge(std::vector<int32_t>& tokens) const {
  TS_CHECK(tokens.size() < static_cast<size_t>(INT32_MAX), ValueError, "BytePairMerges::merge: a piece of ",
           tokens.size(), " bytes is longer than int32 positions can index");
  const auto n = static_cast<int32_t>(tokens.size());
  if (n < 2 || size_ == 0) return;
  thread_local Scratch scratch;
  auto& [next, previous, heap, batch] = scratch;
  next.resize(n);
  previous.resize(n);
  heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    previous[i] = i - 1;
  }
  auto push_pair = [&](int32_t left) {
    const int32_t right = next[left];
    if (right < 0) return;
    if (auto rule = find(tokens[left], tokens[right])) {
      heap.push_back({rule->rank, left, tokens[left], tokens[right], rule->merged});
      std::push_heap(heap.begin(), heap.end(), comes_later);
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (auto rule = find(tokens[i], tokens[i + 1]))
      heap.push_back({rule->rank, i, tokens[i], tokens[i + 1], rule->merged});
  }
  std::make_heap(heap.begin(), heap.end(), comes_later);

  while (!heap.empty()) {
    // Every occurrence of the lowest rank, left to right, before anything they make.
    batch.clear();
    const int32_t rank = heap.front().rank;
    while (!heap.empty() && heap.front().rank == rank) {
      std::pop_heap(heap.begin(), heap.end(), comes_later);
      batch.push_back(heap.back());
      heap.pop_back();
    }
    for (const Candidate& pair : batch) {
      const int32_t left = pair.left, right = next[left];
      // Stale: the left token was merged into its neighbour (which leaves it no next), or
      // either token has changed since.
      if (right < 0 || tokens[left] != pair.left_token || tokens[right] != pair.right_token) continue;
      tokens[left] = pair.merged;
      next[left] = next[right];
      if (next[right] >= 0) previous[next[right]] = left;
      previous[right] = -1;
      next[right] = -1;
      if (previous[left] >= 0) push_pair(previous[left]);
      push_pair(left);
    }
  }

  int32_t out = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) tokens[out++] = tokens[i];
  tokens.resize(out);
  // A huge piece should not pin its scratch for the rest of the thread's life.
  if (next.capacity() > (1 << 16)) scratch = Scratch{};
}

}  // namespace tessera::text
