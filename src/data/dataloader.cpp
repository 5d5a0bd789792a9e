// DataLoader and Epoch. An Epoch fixes its plan (sample order, batch geometry) when it is
// made; with prefetch, one worker thread builds batch k+1 while the consumer holds batch
// k, handing batches over through a one-slot mailbox guarded by a mutex. The worker stops
// at the first exception and leaves it in the mailbox for the consumer to rethrow.
#include "tessera/data/dataloader.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <utility>

#include "tessera/tensor/error.h"

namespace tessera::data {

namespace {

// Everything an epoch needs to build any of its batches; immutable once made, so the
// worker and the consumer may both read it.
struct EpochPlan {
  std::shared_ptr<const Dataset> dataset;
  std::vector<int64_t> order;  // sample order of the whole epoch
  int64_t batch_size = 0;
  int64_t batches = 0;
  int64_t epoch = 0;
  int64_t first_batch = 0;  // where this pass starts (a resumed epoch)
  DistributedSampler sampler;

  EpochPlan(std::shared_ptr<const Dataset> dataset_in, const DataLoaderOptions& options, int64_t epoch_in,
            int64_t first_batch_in = 0)
      : dataset(std::move(dataset_in)), batch_size(options.batch_size), epoch(epoch_in), first_batch(first_batch_in),
        sampler(options.sampler) {
    const int64_t size = dataset->size();
    batches = batches_per_epoch(size, batch_size, options.drop_last);
    TS_CHECK(first_batch >= 0 && first_batch <= batches, IndexError, "DataLoader: first batch ", first_batch,
             " of an epoch of ", batches, " batches");
    if (options.shuffle) {
      order = epoch_permutation(size, options.seed, epoch);
    } else {
      TS_CHECK(epoch >= 0, ValueError, "DataLoader: negative epoch ", epoch);
      order.resize(static_cast<size_t>(size));
      std::iota(order.begin(), order.end(), int64_t{0});
    }
  }

  int64_t global_rows(int64_t batch) const {
    return std::min(batch_size, static_cast<int64_t>(order.size()) - batch * batch_size);
  }

  std::vector<int64_t> indices(int64_t batch) const {
    TS_CHECK(batch >= 0 && batch < batches, IndexError, "DataLoader: batch ", batch, " of an epoch of ", batches,
             " batches");
    const RowRange rows = sampler.rows_of(global_rows(batch));
    const auto first = order.begin() + batch * batch_size;
    return std::vector<int64_t>(first + rows.begin, first + rows.end);
  }

  Batch make(int64_t batch_index) const {
    const int64_t global = global_rows(batch_index);
    const RowRange rows = sampler.rows_of(global);
    Batch batch = dataset->get_batch_in_epoch(indices(batch_index), epoch);
    TS_CHECK(batch.data.defined() && batch.target.defined() && batch.data.dim() >= 1 &&
                 batch.data.size(0) == rows.size() && batch.target.dim() >= 1 &&
                 batch.target.size(0) == rows.size(),
             ValueError, "DataLoader: the dataset's get_batch returned data ",
             batch.data.defined() ? batch.data.str() : "undefined", " and target ",
             batch.target.defined() ? batch.target.str() : "undefined", " for ", rows.size(),
             " indices; expected ", rows.size(), " rows in each");
    batch.index = batch_index;
    batch.first_row = rows.begin;
    batch.global_rows = global;
    return batch;
  }
};

}  // namespace

struct Epoch::State {
  EpochPlan plan;
  bool prefetch;

  // Consumer side.
  bool started = false;
  int64_t next = 0;  // the batch the next advance() hands out
  bool has_current = false;
  Batch current;

  // The mailbox between worker and consumer.
  std::thread worker;
  std::mutex mutex;
  std::condition_variable changed;
  std::optional<Batch> ready;
  std::exception_ptr error;
  bool stop = false;

  State(EpochPlan plan_in, bool prefetch_in) : plan(std::move(plan_in)), prefetch(prefetch_in), next(plan.first_batch) {}

  ~State() {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    changed.notify_all();
    if (worker.joinable()) worker.join();
  }

  void run_worker() {
    for (int64_t b = plan.first_batch; b < plan.batches; ++b) {
      {
        std::lock_guard lock(mutex);
        if (stop) return;
      }
      std::optional<Batch> batch;
      std::exception_ptr failure;
      try {
        batch = plan.make(b);
      } catch (...) {
        failure = std::current_exception();
      }
      // Published only after the handler has ended, so the consumer holds the last reference.
      if (failure) {
        std::lock_guard lock(mutex);
        error = std::move(failure);
        changed.notify_all();
        return;
      }
      std::unique_lock lock(mutex);
      changed.wait(lock, [&] { return stop || !ready.has_value(); });
      if (stop) return;
      ready = std::move(batch);
      changed.notify_all();
    }
  }

  void finish() {
    has_current = false;
    current = Batch{};
    next = plan.batches;
  }

  void advance() {
    if (next >= plan.batches) {
      finish();
      return;
    }
    const int64_t b = next++;
    if (!prefetch) {
      try {
        current = plan.make(b);
      } catch (...) {
        finish();
        throw;
      }
      has_current = true;
      return;
    }
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return ready.has_value() || error != nullptr; });
    if (ready.has_value()) {
      current = std::move(*ready);
      ready.reset();
      has_current = true;
      lock.unlock();
      changed.notify_all();
      return;
    }
    std::exception_ptr failure = std::exchange(error, nullptr);
    lock.unlock();
    finish();
    std::rethrow_exception(failure);
  }
};

Epoch::Epoch(std::unique_ptr<State> state) : state_(std::move(state)) {}
Epoch::Epoch(Epoch&&) noexcept = default;
Epoch& Epoch::operator=(Epoch&&) noexcept = default;
Epoch::~Epoch() = default;

Epoch::Iterator Epoch::begin() {
  TS_CHECK(state_ != nullptr, ValueError, "Epoch::begin() on a moved-from Epoch");
  TS_CHECK(!state_->started, ValueError, "an Epoch is a single pass: begin() was already called");
  state_->started = true;
  if (state_->prefetch && state_->plan.batches > state_->plan.first_batch) {
    State* state = state_.get();
    state->worker = std::thread([state] { state->run_worker(); });
  }
  state_->advance();
  return Iterator(this);
}

int64_t Epoch::size() const { return state_ ? state_->plan.batches - state_->plan.first_batch : 0; }

int64_t Epoch::first_batch() const { return state_ ? state_->plan.first_batch : 0; }

const Batch& Epoch::Iterator::operator*() const {
  TS_CHECK(epoch_ != nullptr && epoch_->state_ && epoch_->state_->has_current, IndexError,
           "Epoch iterator dereferenced past the end");
  return epoch_->state_->current;
}

Epoch::Iterator& Epoch::Iterator::operator++() {
  TS_CHECK(epoch_ != nullptr && epoch_->state_ && epoch_->state_->has_current, IndexError,
           "Epoch iterator incremented past the end");
  epoch_->state_->advance();
  return *this;
}

bool Epoch::Iterator::operator==(std::default_sentinel_t) const {
  return epoch_ == nullptr || !epoch_->state_ || !epoch_->state_->has_current;
}

DataLoader::DataLoader(const Dataset& dataset, DataLoaderOptions options)
    // Non-owning: the aliasing constructor with an empty owner.
    : DataLoader(std::shared_ptr<const Dataset>(std::shared_ptr<void>(), &dataset), options) {}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  TS_CHECK(dataset_ != nullptr, ValueError, "DataLoader: the dataset is null");
  TS_CHECK(options_.batch_size > 0, ValueError, "DataLoader: batch_size must be positive, got ",
           options_.batch_size);
  options_.sampler.check();
}

Epoch DataLoader::epoch(int64_t epoch, int64_t first_batch) const {
  return Epoch(std::make_unique<Epoch::State>(EpochPlan(dataset_, options_, epoch, first_batch), options_.prefetch));
}

int64_t DataLoader::size() const { return batches_per_epoch(dataset_->size(), options_.batch_size, options_.drop_last); }

std::vector<int64_t> DataLoader::batch_indices(int64_t epoch, int64_t batch) const {
  return EpochPlan(dataset_, options_, epoch).indices(batch);
}

}  // namespace tessera::data
