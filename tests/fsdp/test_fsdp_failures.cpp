// FSDP when things go wrong, run under mpirun with 1 to 4 ranks: a collective that fails
// inside forward or backward and is caught leaves the model usable (the next step is
// exact), errors name the unit and its parameters, and the default gradient average is the
// mean over every row even when the ranks' shares of the batch differ.
//
// The failures come from FaultyGroup, which runs each call on the world and then, when
// told, makes the call's wait() throw on every rank alike (so the ranks stay in step, as
// when a real collective fails everywhere). The truth is the plain model trained on the
// whole batch on every rank; float64, tolerance 1e-12 relative (the sharded run sums
// gradients over ranks in another order than the plain run sums over rows).
#include <doctest/doctest.h>

#include <cmath>

#include "../../examples/mnist_net.h"
#include "../dist/dist_test_support.h"
#include "mnist_batch.h"

namespace ts = tessera;
namespace fsdp = tessera::fsdp;
using ts::DType;
using ts::Tensor;
using ts::dist::CollectiveKind;
using test_support::contains;
using test_support::relative_difference;

namespace {

// Waits for the call, then throws: what a failed collective looks like to its caller.
class FailedWork final : public ts::dist::Work {
 public:
  explicit FailedWork(std::shared_ptr<ts::dist::Work> work) : work_(std::move(work)) {}
  void wait() override {
    work_->wait();
    throw ts::dist::DistError("injected failure of " + work_->description());
  }
  bool is_completed() const override { return work_->is_completed(); }
  std::string description() const override { return work_->description(); }

 private:
  std::shared_ptr<ts::dist::Work> work_;
};

class FaultyGroup final : public ts::dist::ProcessGroup {
 public:
  explicit FaultyGroup(std::shared_ptr<ts::dist::ProcessGroup> inner)
      : ProcessGroup(inner->rank(), inner->size(), inner->backend(), inner->name(), false, inner->timeout()),
        inner_(std::move(inner)) {}

  // The next call of this kind, after `skip` more of it, fails (at its wait()).
  std::optional<CollectiveKind> fail_next;
  int skip = 0;

 protected:
  std::shared_ptr<ts::dist::Work> start(ts::dist::CollectiveCall call) override {
    std::shared_ptr<ts::dist::Work> work;
    switch (call.kind) {
      case CollectiveKind::all_gather: work = inner_->all_gather_into_async(call.output, call.input); break;
      case CollectiveKind::reduce_scatter:
        work = inner_->reduce_scatter_into_async(call.output, call.input, call.reduce_op);
        break;
      case CollectiveKind::all_reduce: work = inner_->all_reduce_async(call.output, call.reduce_op); break;
      case CollectiveKind::broadcast: work = inner_->broadcast_async(call.output, call.root); break;
      case CollectiveKind::barrier: work = inner_->barrier_async(); break;
      case CollectiveKind::duplicate:
      case CollectiveKind::split: throw ts::ValueError("FaultyGroup: no new groups");
    }
    if (fail_next == call.kind && skip-- == 0) {
      fail_next.reset();
      skip = 0;
      return std::make_shared<FailedWork>(std::move(work));
    }
    return work;
  }
  std::shared_ptr<ProcessGroup> start_duplicate(ts::dist::CollectiveCall, std::string,
                                                const ts::dist::GroupOptions&) override {
    throw ts::ValueError("FaultyGroup: no duplicates");
  }

 private:
  std::shared_ptr<ts::dist::ProcessGroup> inner_;
};

// A unit one of whose parameters gets no gradient (`unused`), so that its gradient waits
// for the end of backward; `first` runs before it in forward, so in backward `first`'s
// reduction comes after `partial` has collected part of its gradient.
struct WithUnused : ts::nn::Module {
  Tensor weight = ts::full({6, 6}, 0.1, {.dtype = DType::f64});
  Tensor unused = ts::zeros({3}, {.dtype = DType::f64});
  WithUnused() {
    register_parameter("weight", weight);
    register_parameter("unused", unused);
  }
  Tensor forward(Tensor x) override { return ts::matmul(x, weight); }
};

struct PartialModel : ts::nn::Module {
  ts::nn::Linear first{4, 6};
  WithUnused partial;
  ts::nn::Linear last{6, 3};
  PartialModel() {
    first.to(DType::f64);
    last.to(DType::f64);
    register_modules({{"first", first}, {"partial", partial}, {"last", last}});
  }
  Tensor forward(Tensor x) override { return last(ts::tanh(partial(ts::tanh(first(x))))); }
};

using fsdp_test::Batch;

Batch make_batch(uint64_t seed, int64_t rows) { return fsdp_test::make_batch(seed, rows, DType::f64); }

using dist_test::my_rows;

// PyTorch's usual step: the mean loss over this rank's rows (all rows for the plain model),
// backward, SGD. Dropout is keyed by global row, so every split drops the same activations.
void step(ts::nn::Module& model, ts::optim::Optimizer& optimizer, const Batch& batch, ts::data::RowRange rows,
          uint64_t step_number) {
  ts::nn::BatchScope scope({.seed = 5, .step = step_number, .first_row = rows.begin});
  optimizer.zero_grad();
  ts::nll_loss(model(batch.images.narrow(0, rows.begin, rows.size())), batch.labels.narrow(0, rows.begin, rows.size()))
      .backward();
  optimizer.step();
}

void check_same_weights(ts::nn::Module& sharded, ts::nn::Module& plain, double tolerance) {
  ts::StateDict a = sharded.state_dict(), b = plain.state_dict();
  for (auto& [name, tensor] : b) CHECK_MESSAGE(relative_difference(a.at(name), tensor) <= tolerance, name);
}

}  // namespace

TEST_CASE("a collective that fails in forward or backward, caught, leaves the model usable and the next step exact") {
  const auto& world = dist_test::world();
  auto faulty = std::make_shared<FaultyGroup>(world);
  mnist::Net plain, sharded;
  plain.to(DType::f64);
  sharded.to(DType::f64);
  fsdp::fully_shard(sharded, faulty);
  ts::optim::SGD plain_sgd(plain.parameters(), {.lr = 0.05, .momentum = 0.9});
  ts::optim::SGD sharded_sgd(sharded.parameters(), {.lr = 0.05, .momentum = 0.9});
  const int64_t global_rows = 4 * world->size();
  const ts::data::RowRange all{0, global_rows};
  uint64_t number = 0;
  auto both_step = [&] {
    Batch batch = make_batch(100 + number, global_rows);
    step(plain, plain_sgd, batch, all, number);
    step(sharded, sharded_sgd, batch, my_rows(global_rows), number);
    ++number;
  };
  both_step();

  // An all-gather fails in forward (the first unit's): the error names the unit. (One rank
  // gathers nothing: its shard is the whole parameter.)
  Batch batch = make_batch(7, global_rows);
  if (world->size() > 1) {
    faulty->fail_next = CollectiveKind::all_gather;
    std::string gather_error = dist_test::error_of([&] { step(sharded, sharded_sgd, batch, my_rows(global_rows), 99); });
    CHECK(contains(gather_error, "FSDP unit 'conv1' (conv1.weight [32, 1, 3, 3], conv1.bias [32]), all-gathering its "
                                 "parameters on rank " + std::to_string(world->rank()) + ": injected failure of #"));
    CHECK(contains(gather_error, "injected failure of #"));
    both_step();
    check_same_weights(sharded, plain, 1e-12);
  }

  // A reduce-scatter (one rank: the all-reduce into its shard's gradient) fails in backward:
  // that step's gradients are dropped, none leak into the next.
  faulty->fail_next = world->size() > 1 ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce;
  std::string reduce_error = dist_test::error_of([&] { step(sharded, sharded_sgd, batch, my_rows(global_rows), 98); });
  CHECK(contains(reduce_error, "reducing its gradients on rank "));
  CHECK(contains(reduce_error, "injected failure of #"));
  both_step();
  both_step();
  check_same_weights(sharded, plain, 1e-12);
}

TEST_CASE("a reduction that fails while another unit holds part of its gradient: nothing of it leaks into the next step") {
  const auto& world = dist_test::world();
  auto faulty = std::make_shared<FaultyGroup>(world);
  PartialModel plain, sharded;
  fsdp::fully_shard(sharded, faulty);
  ts::optim::SGD plain_sgd(plain.parameters(), {.lr = 0.1});
  ts::optim::SGD sharded_sgd(sharded.parameters(), {.lr = 0.1});
  const int64_t global_rows = 3 * world->size();
  auto run = [&](ts::nn::Module& model, ts::optim::Optimizer& optimizer, ts::data::RowRange rows, uint64_t seed) {
    ts::Generator gen(seed);
    Tensor x = ts::randn({global_rows, 4}, gen, {.dtype = DType::f64});
    optimizer.zero_grad();
    Tensor out = model(x.narrow(0, rows.begin, rows.size()));
    (ts::sum(out * out) / static_cast<double>(global_rows)).backward();
    optimizer.step();
  };
  // gradient_reduction avg at equal rows is sum / world size; the loss is divided by the
  // global rows, so the sharded model's gradients are the plain one's over the world size.
  auto plain_step = [&](uint64_t seed) {
    ts::Generator gen(seed);
    Tensor x = ts::randn({global_rows, 4}, gen, {.dtype = DType::f64});
    plain_sgd.zero_grad();
    Tensor out = plain(x);
    (ts::sum(out * out) / static_cast<double>(global_rows * world->size())).backward();
    plain_sgd.step();
  };
  // `last`'s, then `first`'s: after `partial` took part (one rank reduces by an all-reduce)
  faulty->fail_next = world->size() > 1 ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce;
  faulty->skip = 1;
  std::string error = dist_test::error_of([&] { run(sharded, sharded_sgd, my_rows(global_rows), 1); });
  CHECK(contains(error, "FSDP unit 'first' (first.weight [6, 4], first.bias [6]), reducing its gradients on rank "));
  for (uint64_t seed : {2, 3}) {
    run(sharded, sharded_sgd, my_rows(global_rows), seed);
    plain_step(seed);
  }
  check_same_weights(sharded, plain, 1e-12);
}

TEST_CASE("errors name the FSDP unit and its parameters, not element counts") {
  const auto& world = dist_test::world();
  mnist::Net model;
  fsdp::fully_shard(model, world);
  // The same at one rank, whose shard is the whole parameter: the rules do not depend on N.
  std::string outside = dist_test::error_of([&] { model.fc1.weight.to_vector<float>(); });
  CHECK(contains(outside, "data_ptr(): Tensor[128, 9216] float32 cpu has no memory: it is a parameter of FSDP unit "
                          "'fc1' (fc1.weight [128, 9216], fc1.bias [128]), whose gathered parameters exist only during "
                          "the unit's forward and backward, at every world size: call model(x), not model.forward(x)"));
  CHECK(contains(outside, "read them elsewhere inside fsdp::SummonFullParams"));
}

TEST_CASE("the default gradient average is the mean over every row when ranks get different numbers of rows") {
  // 7 rows: 4+3 at 2 ranks, 3+2+2 at 3, 2+2+2+1 at 4; 2 rows: ranks without any at 3 and 4
  // (their mean loss is NaN, and adds nothing). Each rank's loss is its rows' mean, as in PyTorch.
  const auto& world = dist_test::world();
  for (int64_t global_rows : {7, 2}) {
    CAPTURE(global_rows);
    mnist::Net plain, sharded;
    plain.to(DType::f64);
    sharded.to(DType::f64);
    fsdp::fully_shard(sharded, world);  // gradient_reduction = avg, the default
    ts::optim::SGD plain_sgd(plain.parameters(), {.lr = 0.1});
    ts::optim::SGD sharded_sgd(sharded.parameters(), {.lr = 0.1});
    for (uint64_t number = 0; number < 3; ++number) {
      Batch batch = make_batch(200 + number, global_rows);
      step(plain, plain_sgd, batch, {0, global_rows}, number);
      step(sharded, sharded_sgd, batch, my_rows(global_rows), number);
    }
    check_same_weights(sharded, plain, 1e-12);
  }
}
