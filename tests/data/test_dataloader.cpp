// DataLoader: batch shapes and counts, drop_last, the seeded per-epoch shuffle (against
// an independent Python Philox implementation), prefetch on and off giving the same
// batches, exceptions crossing from the worker, early exit, and the DistributedSampler
// property: the ranks' parts of every step, concatenated in rank order, are the
// single-process batch.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <tessera/tessera.h>

namespace ts = tessera;
using ts::DType;
using ts::Shape;
using ts::data::Batch;
using ts::data::DataLoader;
using ts::data::DataLoaderOptions;

namespace {

// Sample i is data [1, 2, 2] = {4i, 4i+1, 4i+2, 4i+3} and target i, so a batch names its samples.
class IndexDataset : public ts::data::Dataset {
 public:
  explicit IndexDataset(int64_t size, int64_t failing_index = -1) : size_(size), failing_index_(failing_index) {}
  int64_t size() const override { return size_; }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    calls.fetch_add(1);
    const auto rows = static_cast<int64_t>(indices.size());
    std::vector<float> data;
    for (int64_t index : indices) {
      if (index == failing_index_) throw ts::ValueError("IndexDataset: sample " + std::to_string(index) + " is broken");
      for (int k = 0; k < 4; ++k) data.push_back(static_cast<float>(4 * index + k));
    }
    Batch batch;
    batch.data = rows > 0 ? ts::tensor<float>(data, {rows, 1, 2, 2}) : ts::empty({0, 1, 2, 2});
    batch.target = rows > 0 ? ts::tensor<int64_t>(indices) : ts::empty({0}, {.dtype = DType::i64});
    return batch;
  }
  mutable std::atomic<int> calls{0};

 private:
  int64_t size_;
  int64_t failing_index_;
};

std::vector<Batch> collect(const DataLoader& loader, int64_t epoch) {
  std::vector<Batch> batches;
  for (const Batch& batch : loader.epoch(epoch)) batches.push_back(batch);
  return batches;
}

std::vector<int64_t> targets_of(const std::vector<Batch>& batches) {
  std::vector<int64_t> all;
  for (const Batch& b : batches) {
    for (int64_t t : b.target.to_vector<int64_t>()) all.push_back(t);
  }
  return all;
}

}  // namespace

TEST_CASE("DataLoader batch shapes, counts and drop_last") {
  IndexDataset dataset(10);
  DataLoader loader(dataset, {.batch_size = 4});
  CHECK(loader.size() == 3);
  CHECK(loader.dataset_size() == 10);
  std::vector<Batch> batches = collect(loader, 0);
  REQUIRE(batches.size() == 3);
  const std::vector<int64_t> rows{4, 4, 2};
  for (size_t b = 0; b < 3; ++b) {
    CAPTURE(b);
    CHECK(batches[b].data.sizes() == Shape{rows[b], 1, 2, 2});
    CHECK(batches[b].target.sizes() == Shape{rows[b]});
    CHECK(batches[b].target.dtype() == DType::i64);
    CHECK(batches[b].index == static_cast<int64_t>(b));
    CHECK(batches[b].first_row == 0);
    CHECK(batches[b].global_rows == rows[b]);
    CHECK(batches[b].rows() == rows[b]);
  }
  // Without shuffling the order is the dataset's.
  CHECK(targets_of(batches) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(batches[2].data.to_vector<float>() == std::vector<float>{32, 33, 34, 35, 36, 37, 38, 39});

  DataLoader dropping(dataset, {.batch_size = 4, .drop_last = true});
  CHECK(dropping.size() == 2);
  CHECK(targets_of(collect(dropping, 0)) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(DataLoader(dataset, {.batch_size = 5, .drop_last = true}).size() == 2);
  CHECK(DataLoader(dataset, {.batch_size = 64}).size() == 1);
  CHECK(DataLoader(dataset, {.batch_size = 64, .drop_last = true}).size() == 0);
  CHECK(collect(DataLoader(dataset, {.batch_size = 64, .drop_last = true}), 0).empty());

  IndexDataset empty_dataset(0);
  CHECK(collect(DataLoader(empty_dataset, {}), 0).empty());
}

TEST_CASE("DataLoader shuffle: a pure function of (seed, epoch), every index once") {
  IndexDataset dataset(103);
  const DataLoaderOptions options{.batch_size = 10, .shuffle = true, .seed = 1234};
  DataLoader loader(dataset, options), again(dataset, options);
  std::set<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    CAPTURE(epoch);
    std::vector<int64_t> order = targets_of(collect(loader, epoch));
    CHECK(order == targets_of(collect(again, epoch)));
    CHECK(order == ts::data::epoch_permutation(103, 1234, epoch));
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> expected(103);
    for (int64_t i = 0; i < 103; ++i) expected[static_cast<size_t>(i)] = i;
    CHECK(sorted == expected);
    orders.insert(order);
  }
  CHECK(orders.size() == 4);  // each epoch has its own order
  // Asking for epoch 2 first changes nothing: no hidden state carries between epochs.
  DataLoader fresh(dataset, options);
  CHECK(targets_of(collect(fresh, 2)) == ts::data::epoch_permutation(103, 1234, 2));
  CHECK(ts::data::epoch_permutation(103, 1235, 0) != ts::data::epoch_permutation(103, 1234, 0));
}

TEST_CASE("epoch_permutation matches an independent implementation") {
  // Written by a separate Python Philox4x32-10 (checked against Random123's known answer
  // 6627e8d5 e169c58d bc57ac4c 9b00dbd8) and the Fisher-Yates documented in sampler.h.
  CHECK(ts::data::epoch_permutation(10, 42, 3) == std::vector<int64_t>{8, 5, 0, 6, 1, 9, 4, 3, 7, 2});
  CHECK(ts::data::epoch_permutation(10, 42, 0) == std::vector<int64_t>{2, 8, 7, 0, 1, 6, 4, 5, 3, 9});
  CHECK(ts::data::epoch_permutation(12, 0, 0) == std::vector<int64_t>{5, 10, 1, 8, 6, 2, 0, 4, 7, 11, 3, 9});
  CHECK(ts::data::epoch_permutation(1, 7, 7) == std::vector<int64_t>{0});
  CHECK(ts::data::epoch_permutation(0, 7, 7).empty());
  CHECK_THROWS_AS(ts::data::epoch_permutation(5, 0, -1), ts::ValueError);
}

TEST_CASE("DataLoader prefetch on and off give identical batches") {
  IndexDataset dataset(57);
  for (int64_t world_size : {1, 3}) {
    for (int64_t rank = 0; rank < world_size; ++rank) {
      DataLoaderOptions options{.batch_size = 8, .shuffle = true, .seed = 9, .sampler = {rank, world_size}};
      options.prefetch = true;
      DataLoader prefetching(dataset, options);
      options.prefetch = false;
      DataLoader inline_loader(dataset, options);
      for (int64_t epoch = 0; epoch < 3; ++epoch) {
        std::vector<Batch> a = collect(prefetching, epoch), b = collect(inline_loader, epoch);
        REQUIRE(a.size() == b.size());
        for (size_t i = 0; i < a.size(); ++i) {
          CHECK(a[i].data.sizes() == b[i].data.sizes());
          CHECK(a[i].data.to_vector<float>() == b[i].data.to_vector<float>());
          CHECK(a[i].target.to_vector<int64_t>() == b[i].target.to_vector<int64_t>());
          CHECK(a[i].index == b[i].index);
          CHECK(a[i].first_row == b[i].first_row);
          CHECK(a[i].global_rows == b[i].global_rows);
        }
      }
    }
  }
}

TEST_CASE("DataLoader resumes an epoch at any batch with the batches the whole epoch yields from there") {
  IndexDataset dataset(57);
  for (bool prefetch : {true, false}) {
    for (int64_t world_size : {1, 3}) {
      for (int64_t rank = 0; rank < world_size; ++rank) {
        CAPTURE(prefetch);
        CAPTURE(rank);
        DataLoaderOptions options{.batch_size = 8, .shuffle = true, .seed = 5, .sampler = {rank, world_size}};
        options.prefetch = prefetch;
        DataLoader loader(dataset, options);
        std::vector<Batch> whole = collect(loader, 2);
        REQUIRE(whole.size() == 8);  // ceil(57 / 8)
        for (int64_t first = 0; first <= 8; ++first) {
          CAPTURE(first);
          ts::data::Epoch pass = loader.epoch(2, first);
          CHECK(pass.size() == 8 - first);
          CHECK(pass.first_batch() == first);
          int64_t expected = first;
          for (const Batch& batch : pass) {
            REQUIRE(expected < 8);
            const Batch& reference = whole[static_cast<size_t>(expected)];
            CHECK(batch.index == expected);
            CHECK(batch.target.to_vector<int64_t>() == reference.target.to_vector<int64_t>());
            CHECK(batch.data.to_vector<float>() == reference.data.to_vector<float>());
            CHECK(batch.first_row == reference.first_row);
            CHECK(batch.global_rows == reference.global_rows);
            ++expected;
          }
          CHECK(expected == 8);
        }
      }
    }
  }
  DataLoader loader(dataset, {.batch_size = 8});
  CHECK_THROWS_AS(loader.epoch(0, 9), ts::IndexError);
  CHECK_THROWS_AS(loader.epoch(0, -1), ts::IndexError);
}

TEST_CASE("DataLoader rethrows the dataset's exception on the consumer") {
  for (bool prefetch : {true, false}) {
    CAPTURE(prefetch);
    IndexDataset dataset(20, /*failing_index=*/13);  // in batch 3 of 5
    DataLoader loader(dataset, {.batch_size = 4, .prefetch = prefetch});
    std::vector<int64_t> seen;
    std::string message;
    try {
      for (const Batch& batch : loader.epoch(0)) seen.push_back(batch.index);
    } catch (const ts::ValueError& e) {
      message = e.what();
    }
    CHECK(seen == std::vector<int64_t>{0, 1, 2});
    CHECK(message == "IndexDataset: sample 13 is broken");
    // The next epoch is a fresh pass and fails the same way.
    CHECK_THROWS_AS(collect(loader, 1), ts::ValueError);
  }
  // A failure in the very first batch surfaces from begin().
  IndexDataset first_fails(8, 0);
  DataLoader loader(first_fails, {.batch_size = 4});
  ts::data::Epoch epoch = loader.epoch(0);
  CHECK_THROWS_AS(epoch.begin(), ts::ValueError);
}

TEST_CASE("DataLoader: leaving an epoch early stops the worker") {
  IndexDataset dataset(1000);
  DataLoader loader(dataset, {.batch_size = 10});
  int taken = 0;
  for (const Batch& batch : loader.epoch(0)) {
    CHECK(batch.index == 0);
    if (++taken == 1) break;
  }
  // The Epoch is gone and its worker joined: at most the batch taken, the one waiting in
  // the mailbox and the one being built when it was told to stop.
  CHECK(dataset.calls.load() <= 3);
  CHECK(dataset.calls.load() >= 1);
  {
    // Never started at all.
    ts::data::Epoch unused = loader.epoch(1);
    CHECK(unused.size() == 100);
  }
  // Started, one batch taken, then dropped without reaching the end.
  ts::data::Epoch epoch = loader.epoch(2);
  auto it = epoch.begin();
  CHECK(it->index == 0);
  ++it;
  CHECK(it->index == 1);
  CHECK_THROWS_AS(epoch.begin(), ts::ValueError);  // single pass
}

TEST_CASE("DataLoader checks its options and the dataset's batches") {
  IndexDataset dataset(10);
  CHECK_THROWS_AS(DataLoader(dataset, {.batch_size = 0}), ts::ValueError);
  CHECK_THROWS_AS(DataLoader(dataset, {.sampler = {.rank = 2, .world_size = 2}}), ts::ValueError);
  CHECK_THROWS_AS(DataLoader(dataset, {.sampler = {.rank = 0, .world_size = 0}}), ts::ValueError);
  CHECK_THROWS_AS(DataLoader(std::shared_ptr<const ts::data::Dataset>(), {}), ts::ValueError);

  struct ShortDataset : IndexDataset {
    ShortDataset() : IndexDataset(10) {}
    Batch get_batch(const std::vector<int64_t>& indices) const override {
      Batch batch = IndexDataset::get_batch(indices);
      batch.target = batch.target.narrow(0, 0, 1);
      return batch;
    }
  };
  auto short_dataset = std::make_shared<ShortDataset>();
  DataLoader loader(short_dataset, {.batch_size = 4});
  CHECK_THROWS_WITH_AS(collect(loader, 0),
                       "DataLoader: the dataset's get_batch returned data Tensor[4, 1, 2, 2] float32 cpu and target "
                       "Tensor[1] int64 cpu for 4 indices; expected 4 rows in each",
                       ts::ValueError);
}

TEST_CASE("DistributedSampler splits a global batch contiguously, first ranks one row more") {
  using ts::data::DistributedSampler;
  using ts::data::RowRange;
  CHECK(DistributedSampler{0, 3}.rows_of(10) == RowRange{0, 4});
  CHECK(DistributedSampler{1, 3}.rows_of(10) == RowRange{4, 7});
  CHECK(DistributedSampler{2, 3}.rows_of(10) == RowRange{7, 10});
  CHECK(DistributedSampler{0, 1}.rows_of(64) == RowRange{0, 64});
  // Fewer rows than ranks: the last ranks get none, positioned at the end.
  CHECK(DistributedSampler{1, 4}.rows_of(2) == RowRange{1, 2});
  CHECK(DistributedSampler{2, 4}.rows_of(2) == RowRange{2, 2});
  CHECK(DistributedSampler{3, 4}.rows_of(2) == RowRange{2, 2});
}

TEST_CASE("DistributedSampler: the ranks' parts of each step make the single-process batch") {
  // 53 samples: B = 7 leaves a last global batch of 4 (so at N = 5 one rank gets 0 rows),
  // B = 10 a last batch of 3; neither B divides by every N.
  IndexDataset dataset(53);
  for (int64_t batch_size : {7, 10}) {
    for (bool drop_last : {false, true}) {
      for (int64_t epoch : {0, 1}) {
        DataLoaderOptions single_options{.batch_size = batch_size, .shuffle = true, .seed = 77, .drop_last = drop_last};
        const std::vector<Batch> single = collect(DataLoader(dataset, single_options), epoch);
        for (int64_t world_size = 1; world_size <= 5; ++world_size) {
          CAPTURE(batch_size);
          CAPTURE(drop_last);
          CAPTURE(epoch);
          CAPTURE(world_size);
          std::vector<std::vector<Batch>> per_rank;
          for (int64_t rank = 0; rank < world_size; ++rank) {
            DataLoaderOptions options = single_options;
            options.sampler = {.rank = rank, .world_size = world_size};
            per_rank.push_back(collect(DataLoader(dataset, options), epoch));
            REQUIRE(per_rank.back().size() == single.size());  // every rank steps together
          }
          for (size_t step = 0; step < single.size(); ++step) {
            CAPTURE(step);
            const int64_t global_rows = single[step].rows();
            std::vector<int64_t> targets;
            std::vector<float> data;
            int64_t next_row = 0;
            for (int64_t rank = 0; rank < world_size; ++rank) {
              const Batch& part = per_rank[static_cast<size_t>(rank)][step];
              const int64_t expected_rows = global_rows / world_size + (rank < global_rows % world_size ? 1 : 0);
              CHECK(part.rows() == expected_rows);
              CHECK(part.first_row == next_row);
              CHECK(part.global_rows == global_rows);
              CHECK(part.index == static_cast<int64_t>(step));
              CHECK(part.data.sizes() == Shape{expected_rows, 1, 2, 2});
              CHECK(part.target.sizes() == Shape{expected_rows});
              next_row += expected_rows;
              for (int64_t t : part.target.to_vector<int64_t>()) targets.push_back(t);
              for (float v : part.data.to_vector<float>()) data.push_back(v);
            }
            CHECK(next_row == global_rows);
            CHECK(targets == single[step].target.to_vector<int64_t>());
            CHECK(data == single[step].data.to_vector<float>());
          }
        }
      }
    }
  }
}

TEST_CASE("DataLoader over MNIST-shaped data: [B, 1, 28, 28] float and [B] int64") {
  struct Blank : ts::data::Dataset {
    int64_t size() const override { return 5; }
    Batch get_batch(const std::vector<int64_t>& indices) const override {
      const auto rows = static_cast<int64_t>(indices.size());
      return {ts::zeros({rows, 1, 28, 28}), ts::zeros({rows}, {.dtype = DType::i64})};
    }
  } blank;
  DataLoader loader(blank, {.batch_size = 2, .sampler = {.rank = 1, .world_size = 2}});
  std::vector<Batch> batches = collect(loader, 0);
  REQUIRE(batches.size() == 3);
  CHECK(batches[0].data.sizes() == Shape{1, 1, 28, 28});
  CHECK(batches[0].first_row == 1);
  // The last global batch has one row: rank 1's part is empty but still a batch.
  CHECK(batches[2].data.sizes() == Shape{0, 1, 28, 28});
  CHECK(batches[2].target.sizes() == Shape{0});
  CHECK(batches[2].first_row == 1);
  CHECK(batches[2].global_rows == 1);
}
