// The merge rules of a byte-pair encoding, and merging by them. A rule joins two adjacent
// tokens into one; its rank is its line in vocab.bpe (lower merges first). Merging a piece
// repeats, as GPT-2's bpe() does: take the adjacent pair of lowest rank; join each of its
// occurrences, left to right without overlap ("a a a" -> "aa a"); stop when no adjacent
// pair has a rule.
//
// Done with a heap of candidate pairs (8 bytes each) over the tokens in place, so a long
// piece costs O(n log n) time, not the reference's O(n^2) (a run of 10^5 letters without a
// space is a piece), and at most 16 bytes of memory per byte: 4 for the tokens, 12 for the
// heap, which drops its stale candidates when it would grow past 1.5 per byte. All
// occurrences of one rank are joined before any pair of lower rank that a join makes, as in
// the reference's pass.
//
// Internal to src/text (the tokenizer uses it); not installed.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace tessera::text {

struct MergeRule {
  int32_t rank = 0;
  int32_t merged = 0;  // the token the pair becomes
};

class BytePairMerges {
 public:
  // Adds the rule of the next rank. False, adding nothing, when the pair already has one.
  bool add(int32_t left, int32_t right, int32_t merged);
  std::optional<MergeRule> find(int32_t left, int32_t right) const;
  int32_t size() const { return size_; }

  // Merges `tokens` (the byte tokens of one piece) in place.
  void merge(std::vector<int32_t>& tokens) const;

 private:
  struct Slot {
    uint64_t key = kEmpty;
    MergeRule rule;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t key(int32_t left, int32_t right) {
    return uint64_t{static_cast<uint32_t>(left)} << 32 | static_cast<uint32_t>(right);
  }
  size_t slot_of(uint64_t key) const;
  void grow();

  // Open addressing with linear probing; the table is kept at most half full.
  std::vector<Slot> slots_;
  int32_t size_ = 0;
};

}  // namespace tessera::text
