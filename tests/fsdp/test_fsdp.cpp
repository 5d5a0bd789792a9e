// FSDP against the one-rank truth, run under mpirun with 1 to 4 ranks (3 forces padding).
//
// Rank 0 trains the plain model (no FSDP) on the whole global batch and broadcasts its
// losses and parameters; every rank trains the sharded model on its rows of each global
// batch (dropout on, masks keyed by global row) and compares. Tolerances (normwise relative,
// ||a - b|| / ||b|| per tensor, and relative per loss): float64 1e-10 and float32 1e-5 — the
// sharded run sums gradients over ranks in another order than the one-rank run sums over
// rows, so results agree to rounding, and 20 steps of momentum/Adam amplify that a little.
#include <doctest/doctest.h>

#include <cmath>

#include "../../examples/mnist_net.h"
#include "../dist/dist_test_support.h"

namespace ts = tessera;
namespace fsdp = tessera::fsdp;
using ts::DType;
using ts::Tensor;
using test_support::relative_difference;

namespace {

constexpr int64_t kGlobalBatch = 12;  // divisible by 1..4, so avg and sum reductions both apply
constexpr int kBatches = 4;
constexpr uint64_t kSeed = 7;

using Data = test_support::ImageBatches;

Data make_data(DType dtype) { return test_support::random_image_batches(kSeed, kBatches, kGlobalBatch, {1, 28, 28}, 10, dtype); }

enum class OptimizerKind { sgd_momentum, adam };

std::unique_ptr<ts::optim::Optimizer> make_optimizer(OptimizerKind kind, const std::vector<Tensor>& params) {
  if (kind == OptimizerKind::sgd_momentum) {
    return std::make_unique<ts::optim::SGD>(params, ts::optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  }
  return std::make_unique<ts::optim::Adam>(params, ts::optim::AdamOptions{.lr = 1e-3});
}

using dist_test::my_rows;

// One training step on `rows` of the global batch; returns the global loss.
double train_step(mnist::Net& model, ts::optim::Optimizer& optimizer, const Data& data, int step,
                  ts::data::RowRange rows, ts::dist::ProcessGroup* group) {
  const Tensor& images = data.images[step % kBatches];
  const Tensor& labels = data.labels[step % kBatches];
  ts::nn::BatchScope scope({.seed = kSeed, .step = static_cast<uint64_t>(step), .first_row = rows.begin});
  optimizer.zero_grad();
  Tensor output = model(images.narrow(0, rows.begin, rows.size()));
  Tensor loss = ts::nll_loss(output, labels.narrow(0, rows.begin, rows.size()), {.reduction = ts::Reduction::sum}) /
                static_cast<double>(kGlobalBatch);
  loss.backward();
  optimizer.step();
  Tensor global = loss.detach().to(DType::f64);
  if (group) group->all_reduce(global);
  return global.item<double>();
}

struct Reference {
  std::vector<double> losses;
  ts::StateDict parameters;
};

// The one-rank run, computed on rank 0 and broadcast.
Reference reference_run(DType dtype, OptimizerKind kind, int steps, const Data& data) {
  const auto& world = dist_test::world();
  Reference ref;
  mnist::Net model;
  model.to(dtype);
  model.reset_parameters(kSeed);
  if (world->rank() == 0) {
    auto optimizer = make_optimizer(kind, model.parameters());
    for (int step = 0; step < steps; ++step) {
      ref.losses.push_back(train_step(model, *optimizer, data, step, {0, kGlobalBatch}, nullptr));
    }
  } else {
    ref.losses.assign(static_cast<size_t>(steps), 0.0);
  }
  Tensor losses = ts::tensor<double>(ref.losses);
  world->broadcast(losses, 0);
  ref.losses = losses.to_vector<double>();
  for (auto& [name, tensor] : model.state_dict()) {
    Tensor copy = tensor.contiguous().clone();
    world->broadcast(copy, 0);
    ref.parameters.insert(name, copy);
  }
  return ref;
}

void check_parity(DType dtype, OptimizerKind kind, ts::dist::ReduceOp reduction) {
  const auto& world = dist_test::world();
  const int steps = 20;
  const double tolerance = dtype == DType::f64 ? 1e-10 : 1e-5;
  Data data = make_data(dtype);
  Reference ref = reference_run(dtype, kind, steps, data);

  mnist::Net model;
  model.to(dtype);
  model.reset_parameters(kSeed);
  fsdp::fully_shard(model, world, {.gradient_reduction = reduction});
  auto optimizer = make_optimizer(kind, model.parameters());
  double worst_loss = 0;
  for (int step = 0; step < steps; ++step) {
    double loss = train_step(model, *optimizer, data, step, my_rows(kGlobalBatch), world.get());
    worst_loss = std::max(worst_loss, std::abs(loss - ref.losses[step]) / std::abs(ref.losses[step]));
  }
  double worst_parameter = 0;
  ts::StateDict full = model.state_dict();
  CHECK(full.keys() == ref.parameters.keys());
  for (auto& [name, tensor] : ref.parameters) {
    CHECK(full.at(name).sizes() == tensor.sizes());
    worst_parameter = std::max(worst_parameter, relative_difference(full.at(name), tensor));
  }
  if (world->rank() == 0) {
    MESSAGE(std::string(dtype_name(dtype)), std::string(kind == OptimizerKind::adam ? " Adam" : " SGD+momentum"), " at ", world->size(),
            " ranks: worst loss error ", worst_loss, ", worst parameter error ", worst_parameter);
  }
  CHECK(worst_loss <= tolerance);
  CHECK(worst_parameter <= tolerance);
}

}  // namespace

TEST_CASE("parity with one rank: SGD with momentum, float64") {
  check_parity(DType::f64, OptimizerKind::sgd_momentum, ts::dist::ReduceOp::sum);
}

TEST_CASE("parity with one rank: Adam, float64") {
  check_parity(DType::f64, OptimizerKind::adam, ts::dist::ReduceOp::sum);
}

TEST_CASE("parity with one rank: SGD with momentum and Adam, float32") {
  check_parity(DType::f32, OptimizerKind::sgd_momentum, ts::dist::ReduceOp::sum);
  check_parity(DType::f32, OptimizerKind::adam, ts::dist::ReduceOp::sum);
}

TEST_CASE("parity with averaged gradients (PyTorch's default) when every rank sees as many rows") {
  // With avg, each rank's loss must be its rows' mean: rescale the sum-based step.
  const auto& world = dist_test::world();
  Data data = make_data(DType::f64);
  Reference ref = reference_run(DType::f64, OptimizerKind::sgd_momentum, 3, data);
  mnist::Net model;
  model.to(DType::f64);
  model.reset_parameters(kSeed);
  fsdp::fully_shard(model, world);  // avg
  ts::optim::SGD optimizer(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    ts::data::RowRange rows = my_rows(kGlobalBatch);
    ts::nn::BatchScope scope({.seed = kSeed, .step = static_cast<uint64_t>(step), .first_row = rows.begin});
    optimizer.zero_grad();
    Tensor output = model(data.images[step].narrow(0, rows.begin, rows.size()));
    ts::nll_loss(output, data.labels[step].narrow(0, rows.begin, rows.size())).backward();  // mean
    optimizer.step();
  }
  ts::StateDict full = model.state_dict();
  for (auto& [name, tensor] : ref.parameters) CHECK(relative_difference(full.at(name), tensor) <= 1e-10);
}

TEST_CASE("two equal-size parameters in one unit keep their order") {
  // One unit holding a.weight and b.weight, the same shape: a swapped layout would load
  // each into the other.
  struct Pair : ts::nn::Module {
    ts::nn::Linear a{5, 5, {.bias = false}}, b{5, 5, {.bias = false}};
    Pair() { register_modules({{"a", a}, {"b", b}}); }
    Tensor forward(Tensor x) override { return b(a(x)); }
  };
  const auto& world = dist_test::world();
  Pair plain, sharded;
  plain.to(DType::f64);
  sharded.to(DType::f64);
  ts::StateDict expected = plain.state_dict();
  fsdp::fully_shard(sharded, world, {.wrap_policy = fsdp::WrapPolicy::size_based(1'000'000)});  // root unit only
  CHECK(fsdp::memory_report(sharded).units == 1);
  ts::StateDict full = sharded.state_dict();
  CHECK(full.keys() == std::vector<std::string>{"a.weight", "b.weight"});
  CHECK(full.at("a.weight").to_vector<double>() == expected.at("a.weight").to_vector<double>());
  CHECK(full.at("b.weight").to_vector<double>() == expected.at("b.weight").to_vector<double>());
  CHECK(full.at("a.weight").to_vector<double>() != full.at("b.weight").to_vector<double>());
  Tensor x = ts::ones({2, 5}, {.dtype = DType::f64});
  CHECK(relative_difference(sharded(x), plain(x)) <= 1e-15);
}

TEST_CASE("parameters() lists one flat shard per unit; gaps and padding stay exactly zero") {
  const auto& world = dist_test::world();
  mnist::Net model;
  fsdp::fully_shard(model, world);
  std::vector<std::string> names;
  for (auto& [name, p] : model.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"conv1._flat_param", "conv2._flat_param", "fc1._flat_param", "fc2._flat_param"});
  // Weight decay and momentum would move any nonzero gap or padding element.
  ts::optim::SGD optimizer(model.parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1});
  Data data = make_data(DType::f32);
  for (int step = 0; step < 3; ++step) train_step(model, optimizer, data, step, my_rows(kGlobalBatch), world.get());
  int64_t unused_elements = 0;
  for (const fsdp::UnitInfo& unit : fsdp::units(model)) {
    std::vector<float> values = unit.shard.to_vector<float>();
    std::vector<bool> used(values.size(), false);
    for (size_t i = 0; i < unit.layout.entries().size(); ++i) {
      fsdp::ElementRange part = unit.layout.overlap(i, unit.range);
      for (int64_t e = part.begin; e < part.end; ++e) used[static_cast<size_t>(e - unit.range.begin)] = true;
    }
    int64_t nonzero = 0;
    for (size_t e = 0; e < values.size(); ++e) {
      if (used[e]) continue;
      ++unused_elements;
      if (values[e] != 0.0f || std::signbit(values[e])) ++nonzero;
    }
    CAPTURE(unit.name);
    CHECK(nonzero == 0);
  }
  // fc1 (1,179,776 elements) does not split evenly over 3 ranks: some rank holds padding.
  ts::Tensor total = ts::full({1}, static_cast<double>(unused_elements), {.dtype = DType::f64});
  world->all_reduce(total);
  if (world->size() == 3) CHECK(total.item<double>() > 0);
}

TEST_CASE("a rank whose share of the global batch is empty still takes part") {
  // A global batch of 2 rows: at 3 and 4 ranks some ranks get none, yet every rank must
  // run forward and backward so that the collectives match.
  const auto& world = dist_test::world();
  Data data = make_data(DType::f64);
  mnist::Net plain, sharded;
  plain.to(DType::f64);
  sharded.to(DType::f64);
  fsdp::fully_shard(sharded, world, {.gradient_reduction = ts::dist::ReduceOp::sum});
  Tensor images = data.images[0].narrow(0, 0, 2), labels = data.labels[0].narrow(0, 0, 2);
  ts::data::RowRange rows = my_rows(2);
  {
    ts::nn::BatchScope scope({.seed = kSeed, .step = 0, .first_row = rows.begin});
    Tensor loss = ts::nll_loss(sharded(images.narrow(0, rows.begin, rows.size())),
                               labels.narrow(0, rows.begin, rows.size()), {.reduction = ts::Reduction::sum}) / 2.0;
    loss.backward();
  }
  {
    ts::nn::BatchScope scope({.seed = kSeed, .step = 0, .first_row = 0});
    ts::nll_loss(plain(images), labels).backward();
  }
  ts::optim::SGD(plain.parameters(), {.lr = 0.1}).step();
  ts::optim::SGD(sharded.parameters(), {.lr = 0.1}).step();
  ts::StateDict a = sharded.state_dict(), b = plain.state_dict();
  for (auto& [name, tensor] : b) CHECK(relative_difference(a.at(name), tensor) <= 1e-12);
}
