// Seeded per-epoch permutation and the even contiguous split of a global batch over ranks.
#include "tessera/data/sampler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "tessera/tensor/error.h"
#include "tessera/tensor/philox.h"

namespace tessera::data {

std::vector<int64_t> epoch_permutation(int64_t size, uint64_t seed, int64_t epoch) {
  TS_CHECK(size >= 0, ValueError, "epoch_permutation: negative dataset size ", size);
  TS_CHECK(epoch >= 0, ValueError, "epoch_permutation: negative epoch ", epoch);
  std::vector<int64_t> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), int64_t{0});
  for (int64_t j = 0; j + 1 < size; ++j) {
    const int64_t i = size - 1 - j;
    philox::Counter bits = philox::block(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(j));
    const uint64_t draw = static_cast<uint64_t>(bits.word[1]) << 32 | bits.word[0];
    const auto k = static_cast<int64_t>(draw % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(k)]);
  }
  return order;
}

int64_t batches_per_epoch(int64_t size, int64_t batch_size, bool drop_last) {
  TS_CHECK(batch_size > 0, ValueError, "batch_size must be positive, got ", batch_size);
  TS_CHECK(size >= 0, ValueError, "negative dataset size ", size);
  return drop_last ? size / batch_size : (size + batch_size - 1) / batch_size;
}

void DistributedSampler::check() const {
  TS_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, ValueError, "DistributedSampler: rank ", rank,
           " is not in [0, world_size = ", world_size, ")");
}

RowRange DistributedSampler::rows_of(int64_t global_rows) const {
  check();
  TS_CHECK(global_rows >= 0, ValueError, "DistributedSampler: negative batch size ", global_rows);
  const int64_t base = global_rows / world_size, extra = global_rows % world_size;
  const int64_t begin = rank * base + std::min(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

}  // namespace tessera::data
