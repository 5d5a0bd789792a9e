// DataLoader: batches of a Dataset, seeded shuffling per epoch, this rank's part of each
// global batch, and background prefetch of the next batch on a worker thread.
//
//   ts::data::MNIST train("data/mnist", ts::data::Split::train, ts::data::kMnistNormalize);
//   ts::data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .seed = 1,
//                                       .sampler = {.rank = rank, .world_size = world}});
//   for (int64_t epoch = 0; epoch < 14; ++epoch)
//     for (const ts::data::Batch& batch : loader.epoch(epoch)) { ... batch.data, batch.target ... }
//
// Resuming mid-epoch: loader.epoch(epoch, first_batch) yields batches first_batch, ... of
// that epoch, the very batches (same indices, same batch.index) the whole epoch would have
// yielded from there, since an epoch's order is a pure function of (seed, epoch).
//
// Every rank runs the same number of batches per epoch (a rank whose share of a short last
// batch is empty still gets it, with 0 rows), so collectives stay in step. An exception
// thrown by the dataset on the worker is rethrown on the consumer's thread, from the
// increment that would have produced that batch; leaving the loop early (break, exception)
// destroys the Epoch, which stops and joins the worker.
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "tessera/data/dataset.h"
#include "tessera/data/sampler.h"

namespace tessera::data {

struct DataLoaderOptions {
  int64_t batch_size = 64;  // rows of the GLOBAL batch, split over sampler.world_size ranks
  bool shuffle = false;
  uint64_t seed = 0;
  bool drop_last = false;  // drop a short last global batch
  bool prefetch = true;    // build the next batch on a worker thread
  DistributedSampler sampler{};
};

// One pass over the data: a single-pass input range of const Batch&, each valid until the
// next increment (copy the Batch, a few tensor handles, to keep it).
class Epoch {
 public:
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = const Batch*;
    using reference = const Batch&;

    Iterator() = default;
    explicit Iterator(Epoch* epoch) : epoch_(epoch) {}
    const Batch& operator*() const;
    const Batch* operator->() const { return &**this; }
    Iterator& operator++();
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const;

   private:
    Epoch* epoch_ = nullptr;
  };

  Epoch(Epoch&&) noexcept;
  Epoch& operator=(Epoch&&) noexcept;
  ~Epoch();

  // Starts the pass (and the worker) and produces the first batch; callable once.
  Iterator begin();
  std::default_sentinel_t end() const { return {}; }
  int64_t size() const;         // batches this pass yields: the epoch's, less first_batch()
  int64_t first_batch() const;  // the index of the first batch it yields

 private:
  friend class DataLoader;
  struct State;
  explicit Epoch(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

class DataLoader {
 public:
  // The dataset must outlive the loader and every Epoch it returns.
  DataLoader(const Dataset& dataset, DataLoaderOptions options = {});
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});

  // The batches of epoch `epoch` (the shuffle order depends on it; see sampler.h), from
  // batch `first_batch` on (0 <= first_batch <= size(); size() gives an empty pass).
  Epoch epoch(int64_t epoch, int64_t first_batch = 0) const;

  int64_t size() const;  // batches per epoch, the same on every rank
  int64_t dataset_size() const { return dataset_->size(); }
  const DataLoaderOptions& options() const { return options_; }
  // This rank's dataset indices for batch `batch` of epoch `epoch`, in batch order (recomputes
  // the epoch's order: O(dataset size) per call).
  std::vector<int64_t> batch_indices(int64_t epoch, int64_t batch) const;

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
};

}  // namespace tessera::data
