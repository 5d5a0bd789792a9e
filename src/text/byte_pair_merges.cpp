#include "tessera/text/byte_pair_merges.h"

#include <algorithm>
#include <climits>
#include <functional>
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

// A candidate join: the pair starting at position `left`, whose rule has rank `rank`, in one
// word ordered by rank, then position: the heap's top is the join that comes first. 8 bytes
// a candidate, so a long piece costs at most 4 + 12 bytes per byte (tokens, heap).
using Candidate = uint64_t;
Candidate candidate(int32_t rank, int32_t left) {
  return uint64_t{static_cast<uint32_t>(rank)} << 32 | static_cast<uint32_t>(left);
}
int32_t rank_of(Candidate c) { return static_cast<int32_t>(c >> 32); }
int32_t left_of(Candidate c) { return static_cast<int32_t>(c & 0xFFFFFFFFu); }

// A position whose byte was joined into the token on its left.
constexpr int32_t kJoined = -1;

// Scratch space reused by the calls on one thread (merge runs once per new piece).
struct Scratch {
  std::vector<Candidate> heap, deferred;
};

// One piece being merged. A token stays at the position of its first byte; the positions of
// its other bytes are kJoined, and neighbours are found by skipping those (at most a token's
// length of them). The heap holds candidate joins, lowest rank first.
class PieceMerger {
 public:
  PieceMerger(const BytePairMerges& rules, std::vector<int32_t>& tokens, Scratch& scratch)
      : rules_(rules),
        tokens_(tokens),
        n_(static_cast<int32_t>(tokens.size())),
        heap_(scratch.heap),
        deferred_(scratch.deferred),
        // Stale candidates (a token since joined or changed) are dropped when they come off
        // the heap; when they would grow it past 1.5 candidates a byte, the heap keeps only
        // live ones (at most one per token), so it never holds more than that.
        heap_limit_(static_cast<size_t>(n_) + static_cast<size_t>(n_) / 2 + 16) {
    heap_.clear();
    deferred_.clear();
    heap_.reserve(heap_limit_);
    for (int32_t i = 0; i + 1 < n_; ++i) {
      if (auto rule = rules_.find(tokens_[i], tokens_[i + 1])) heap_.push_back(candidate(rule->rank, i));
    }
    std::make_heap(heap_.begin(), heap_.end(), std::greater<>());
  }

  // Joins by rank until no rule applies, then drops the joined positions.
  void run() {
    while (!heap_.empty()) join_lowest_rank();
    std::erase(tokens_, kJoined);
  }

 private:
  // Every occurrence of the lowest rank, left to right. A join never makes a pair of its own
  // rank (the token it makes is longer than either of its parts), so the pairs of this rank on
  // the heap are all there will be.
  void join_lowest_rank() {
    rank_ = rank_of(heap_.front());
    while (!heap_.empty() && rank_of(heap_.front()) == rank_) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
      const int32_t left = left_of(heap_.back());
      heap_.pop_back();
      if (rank_at(left) != rank_) continue;  // stale: a token joined or changed since
      const int32_t right = next_token(left);
      tokens_[left] = rules_.find(tokens_[left], tokens_[right])->merged;
      tokens_[right] = kJoined;
      push_pair(previous_token(left));
      push_pair(left);
    }
    for (Candidate c : deferred_) push(c);
    deferred_.clear();
  }

  int32_t next_token(int32_t i) const {
    do ++i;
    while (i < n_ && tokens_[i] == kJoined);
    return i < n_ ? i : -1;
  }
  int32_t previous_token(int32_t i) const {
    do --i;
    while (i >= 0 && tokens_[i] == kJoined);
    return i;
  }
  // The rank of the pair at `left` now, or -1 when it has no rule.
  int32_t rank_at(int32_t left) const {
    if (left < 0 || tokens_[left] == kJoined) return -1;
    const int32_t right = next_token(left);
    if (right < 0) return -1;
    const std::optional<MergeRule> rule = rules_.find(tokens_[left], tokens_[right]);
    return rule ? rule->rank : -1;
  }

  void push_pair(int32_t left) {
    const int32_t pair_rank = rank_at(left);
    if (pair_rank < 0) return;
    // A pair of lower rank made by a join waits until every occurrence of this rank is
    // joined, as in GPT-2's bpe(), which joins one rank per pass over the word.
    if (pair_rank < rank_) return deferred_.push_back(candidate(pair_rank, left));
    push(candidate(pair_rank, left));
  }
  void push(Candidate c) {
    if (heap_.size() >= heap_limit_) compact();
    heap_.push_back(c);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
  }
  void compact() {
    std::erase_if(heap_, [&](Candidate c) { return rank_at(left_of(c)) != rank_of(c); });
    std::sort(heap_.begin(), heap_.end());
    heap_.erase(std::unique(heap_.begin(), heap_.end()), heap_.end());  // ascending: already a heap
  }

  const BytePairMerges& rules_;
  std::vector<int32_t>& tokens_;
  const int32_t n_;
  std::vector<Candidate>& heap_;
  std::vector<Candidate>& deferred_;
  const size_t heap_limit_;
  int32_t rank_ = -1;  // the rank being joined
};

}  // namespace

void BytePairMerges::merge(std::vector<int32_t>& tokens) const {
  TS_CHECK(tokens.size() < static_cast<size_t>(INT32_MAX), ValueError, "BytePairMerges::merge: a piece of ",
           tokens.size(), " bytes is longer than int32 positions can index");
  if (tokens.size() < 2 || size_ == 0) return;
  thread_local Scratch scratch;
  PieceMerger(*this, tokens, scratch).run();
  // A huge piece should not pin its scratch for the rest of the thread's life.
  if (scratch.heap.capacity() > (1 << 16) || scratch.deferred.capacity() > (1 << 16)) scratch = Scratch{};
}

}  // namespace tessera::text
