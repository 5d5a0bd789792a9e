// Hybrid sharding (HSDP) against the one-rank truth, and what crosses groups, under
// mpirun at 1 to 4 ranks: meshes of R replicas x S ranks (2 x 2 at 4 ranks, 4 x 1, 2 x 1,
// 3 x 1, 1 x 1). Rank 0 trains the plain MNIST network (dropout on) on the whole global
// batch; every rank trains the hybrid-sharded one on its rows (the world's data split, as
// DDP's) and compares. Tolerance float64 1e-10 normwise per tensor, as test_fsdp.cpp: the
// ranks sum gradients in another order than one rank sums rows, so results agree to rounding.
// Checkpoints of a 2 x 2 job loading at 1, 3 and 4 ranks: tests/checkpoint/reshard_worker.cpp.
#include <doctest/doctest.h>

#include <cmath>

#include "../../examples/mnist_net.h"
#include "../dist/dist_test_support.h"

namespace ts = tessera;
namespace fsdp = tessera::fsdp;
using test_support::relative_difference;
using ts::DType;
using ts::Tensor;

namespace {

constexpr int64_t kGlobalBatch = 12;
constexpr int kSteps = 6;
constexpr uint64_t kSeed = 11;

using Data = test_support::ImageBatches;

Data make_data() { return test_support::random_image_batches(kSeed, kSteps, kGlobalBatch, {1, 28, 28}, 10, DType::f64); }

// One SGD step on `rows` of batch `step` (the loss a mean over the rank's rows, gradients
// averaged); returns this rank's loss times its share of the rows.
double train_step(ts::nn::Module& model, ts::optim::Optimizer& optimizer, const Data& data, int step,
                  ts::data::RowRange rows) {
  ts::nn::BatchScope scope({.seed = kSeed, .step = static_cast<uint64_t>(step), .first_row = rows.begin});
  optimizer.zero_grad();
  Tensor output = model(data.images[step].narrow(0, rows.begin, rows.size()));
  Tensor loss = ts::nll_loss(output, data.labels[step].narrow(0, rows.begin, rows.size()));
  loss.backward();
  optimizer.step();
  return loss.item<double>() * static_cast<double>(rows.size()) / kGlobalBatch;
}

// The meshes to try at this world size: R x S with S = 1 (DDP-like) and, when even, 2 x W/2.
std::vector<std::array<int, 2>> meshes(int world) {
  std::vector<std::array<int, 2>> shapes{{world, 1}};
  if (world % 2 == 0 && world > 2) shapes.push_back({2, world / 2});
  return shapes;
}

}  // namespace

TEST_CASE("hybrid sharding trains what one rank trains (float64, 1e-10), for every mesh shape tried") {
  const auto& world = dist_test::world();
  Data data = make_data();
  // The one-rank run, on rank 0, broadcast.
  std::vector<double> ref_losses(kSteps, 0.0);
  ts::StateDict ref_parameters;
  {
    mnist::Net model;
    model.to(DType::f64);
    model.reset_parameters(kSeed);
    if (world->rank() == 0) {
      ts::optim::SGD sgd(model.parameters(), {.lr = 0.02, .momentum = 0.9});
      for (int step = 0; step < kSteps; ++step) ref_losses[step] = train_step(model, sgd, data, step, {0, kGlobalBatch});
    }
    Tensor losses = ts::tensor<double>(ref_losses);
    world->broadcast(losses, 0);
    ref_losses = losses.to_vector<double>();
    for (auto& [name, tensor] : model.state_dict()) {
      Tensor copy = tensor.contiguous().clone();
      world->broadcast(copy, 0);
      ref_parameters.insert(name, copy);
    }
  }
  const ts::data::RowRange rows = ts::data::DistributedSampler{world->rank(), world->size()}.rows_of(kGlobalBatch);
  for (std::array<int, 2> shape : meshes(world->size())) {
    CAPTURE(shape[0]);
    CAPTURE(shape[1]);
    auto mesh = ts::dist::init_device_mesh(world, shape);
    mnist::Net model;
    model.to(DType::f64);
    model.reset_parameters(kSeed);
    fsdp::fully_shard(model, mesh);
    CHECK(fsdp::units(model).front().layout.world_size() == shape[1]);  // sharded within the shard group
    ts::optim::SGD sgd(model.parameters(), {.lr = 0.02, .momentum = 0.9});
    double worst_loss = 0;
    for (int step = 0; step < kSteps; ++step) {
      Tensor loss = ts::full({1}, train_step(model, sgd, data, step, rows), {.dtype = DType::f64});
      world->all_reduce(loss);
      worst_loss = std::max(worst_loss, std::abs(loss.item<double>() - ref_losses[step]) / std::abs(ref_losses[step]));
    }
    double worst_parameter = 0;
    ts::StateDict full = model.state_dict();
    CHECK(full.keys() == ref_parameters.keys());
    for (auto& [name, tensor] : ref_parameters) worst_parameter = std::max(worst_parameter, relative_difference(full.at(name), tensor));
    if (world->rank() == 0) {
      MESSAGE("HSDP ", shape[0], " x ", shape[1], ": worst loss error ", worst_loss, ", worst parameter error ",
              worst_parameter);
    }
    CHECK(worst_loss <= 1e-10);
    CHECK(worst_parameter <= 1e-10);
  }
}

TEST_CASE("hybrid sharding's communication: gathers and reduce-scatters stay in the shard group, one all-reduce "
          "per unit crosses replicas") {
  const auto& world = dist_test::world();
  Data data = make_data();
  const ts::data::RowRange rows = ts::data::DistributedSampler{world->rank(), world->size()}.rows_of(kGlobalBatch);
  for (std::array<int, 2> shape : meshes(world->size())) {
    CAPTURE(shape[0]);
    auto mesh = ts::dist::init_device_mesh(world, shape);
    mnist::Net model;
    model.to(DType::f64);
    fsdp::fully_shard(model, mesh);
    ts::optim::SGD sgd(model.parameters(), {.lr = 0.01});
    train_step(model, sgd, data, 0, rows);  // records the order
    const fsdp::MemoryReport before = fsdp::memory_report(model);
    const uint64_t world_calls = world->next_sequence();
    const uint64_t shard_calls = mesh->shard_group()->next_sequence();
    const uint64_t replica_calls = mesh->replicate_group()->next_sequence();
    train_step(model, sgd, data, 1, rows);
    const fsdp::MemoryReport after = fsdp::memory_report(model);
    int64_t padded_bytes = 0, shard_bytes = 0;
    for (const fsdp::UnitInfo& unit : fsdp::units(model)) {
      padded_bytes += unit.layout.padded_numel() * 8;
      shard_bytes += unit.layout.shard_numel() * 8;
    }
    const int units = after.units;
    CHECK(units == 4);
    CHECK(after.world_size == shape[1]);
    CHECK(after.replicas == shape[0]);
    // Within the shard group: every unit gathered for forward and for backward (not in a
    // group of one rank, whose shard is the whole parameter), and reduce-scattered.
    const int gathers = shape[1] > 1 ? 2 : 0;
    CHECK(after.all_gathers - before.all_gathers == gathers * units);
    CHECK(after.all_gathered_bytes - before.all_gathered_bytes == gathers * padded_bytes);
    CHECK(after.reduce_scatters - before.reduce_scatters == units);
    CHECK(after.reduce_scattered_bytes - before.reduce_scattered_bytes == padded_bytes);
    // Across replicas: the reduced shards only (none with one replica).
    const int crossing = shape[0] > 1 ? units : 0;
    CHECK(after.replica_all_reduces - before.replica_all_reduces == crossing);
    CHECK(after.replica_all_reduced_bytes - before.replica_all_reduced_bytes == (shape[0] > 1 ? shard_bytes : 0));
    // The groups' own sequences agree: nothing ran on the world, each group ran its share.
    CHECK(world->next_sequence() == world_calls);
    // Plus, with avg over a shard group of several ranks, the one all-gather of their row
    // counts that makes avg the mean over every row (schedule.cpp, row_weight).
    const int row_counts = shape[1] > 1 ? 1 : 0;
    CHECK(mesh->shard_group()->next_sequence() - shard_calls == static_cast<uint64_t>((gathers + 1) * units + row_counts));
    CHECK(mesh->replicate_group()->next_sequence() - replica_calls == static_cast<uint64_t>(crossing));
    if (shape[0] > 1) {
      CHECK(after.str().find("across " + std::to_string(shape[0]) + " replicas: all-reduced") != std::string::npos);
      if (world->rank() == 0) MESSAGE(after.str());
    }
  }
}

TEST_CASE("hybrid sharding: the full state dict, clipping and the memory report see one model") {
  const auto& world = dist_test::world();
  if (world->size() % 2 != 0) return;
  auto mesh = ts::dist::init_device_mesh(world, {2, world->size() / 2});
  mnist::Net plain, hybrid;
  plain.to(DType::f64);
  hybrid.to(DType::f64);
  fsdp::fully_shard(hybrid, mesh, {.gradient_reduction = ts::dist::ReduceOp::sum});
  ts::StateDict expected = plain.state_dict();
  ts::StateDict full = hybrid.state_dict();
  for (auto& [name, tensor] : expected) CHECK(relative_difference(full.at(name), tensor) == 0);
  // Sum reduction: each rank's loss divided by the global batch; the norm is the one-rank norm.
  Data data = make_data();
  const ts::data::RowRange rows = ts::data::DistributedSampler{world->rank(), world->size()}.rows_of(kGlobalBatch);
  {
    ts::nn::BatchScope scope({.seed = kSeed, .step = 0, .first_row = 0});
    (ts::nll_loss(plain(data.images[0]), data.labels[0], {.reduction = ts::Reduction::sum}) / kGlobalBatch).backward();
  }
  {
    ts::nn::BatchScope scope({.seed = kSeed, .step = 0, .first_row = rows.begin});
    Tensor out = hybrid(data.images[0].narrow(0, rows.begin, rows.size()));
    (ts::nll_loss(out, data.labels[0].narrow(0, rows.begin, rows.size()), {.reduction = ts::Reduction::sum}) /
     kGlobalBatch)
        .backward();
  }
  const double expected_norm = ts::nn::clip_grad_norm(plain.parameters(), 1e9);
  const double norm = fsdp::clip_grad_norm(hybrid, 1e9);
  CHECK(std::abs(norm - expected_norm) <= 1e-12 * expected_norm);
}
