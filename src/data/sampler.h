// Which samples make up each batch of an epoch, and which rows of it a rank gets.
//
// Shuffling: the order of epoch e is a pure function of (seed, e), computed with Tessera's
// counter-based Philox: a Fisher-Yates shuffle (Durstenfeld's, from the top) of 0..n-1
// whose j-th draw is philox::block(seed, stream = e, block = j), words 0 and 1 read as the
// 64-bit number u = word0 | word1 << 32: for j = 0 .. n-2, with i = n-1-j, swap elements
// i and u mod (i+1). (The modulo bias is below n / 2^64: nil for any real dataset.)
//
// Distribution: the global batch is the same at every world size; rank r of N gets the
// contiguous rows [begin_r, end_r) of it, the rows split as evenly as possible with the
// first (rows mod N) ranks getting one extra. Concatenating the ranks' parts in rank
// order gives back the global batch, so results do not depend on the world size.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::data {

// The sample order of epoch `epoch`: a permutation of 0..size-1.
std::vector<int64_t> epoch_permutation(int64_t size, uint64_t seed, int64_t epoch);

// Batches in an epoch of `size` samples: ceil(size / batch_size), or floor with drop_last.
int64_t batches_per_epoch(int64_t size, int64_t batch_size, bool drop_last);

struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const RowRange&) const = default;
};

struct DistributedSampler {
  int64_t rank = 0;
  int64_t world_size = 1;

  // This rank's rows of a global batch of `global_rows` rows (possibly none of them).
  RowRange rows_of(int64_t global_rows) const;
  // Throws ValueError unless 0 <= rank < world_size.
  void check() const;
};

}  // namespace tessera::data
