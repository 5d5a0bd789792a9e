// FSDP's mixed precision on the CPU, run under mpirun with 1 to 4 ranks. The CPU has no
// bfloat16 kernels, so the mechanics are checked one step up: float64 shards and
// optimizer state with float32 parameters and compute (param_dtype), gradients reduced in
// float32 or float64 (reduce_dtype). These are the same casts as float32 shards with
// bfloat16 compute on a GPU (tests/gpu/test_fsdp_gpu.cpp runs that).
//
// The truth is written by hand on rank 0: a float64 master model, and each step a float32
// copy of it that runs forward and backward, its gradients cast to float64 and the master
// stepped with SGD. At one rank the sharded run does exactly these operations, so it must
// agree to the last bit; at N ranks each rank computes its rows' gradients in float32 and
// the reduction adds them in another order: agreement within 1e-5 (relative, as the
// float32 parity tests; measured below 1e-6).
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

constexpr int64_t kGlobalBatch = 12;
constexpr int kSteps = 6;
constexpr uint64_t kSeed = 11;

struct Batch {
  Tensor images, labels;
};

std::vector<Batch> make_batches() {
  ts::Generator gen(kSeed);
  std::vector<Batch> batches;
  for (int i = 0; i < kSteps; ++i) {
    batches.push_back({ts::randn({kGlobalBatch, 1, 28, 28}, gen, {.dtype = DType::f64}), ts::randint(0, 10, {kGlobalBatch}, gen)});
  }
  return batches;
}

ts::data::RowRange my_rows() {
  const auto& world = dist_test::world();
  return ts::data::DistributedSampler{world->rank(), world->size()}.rows_of(kGlobalBatch);
}

// The network's forward with each layer's input cast to float32 and, when `output_dtype`
// is set, its output cast to it: what FSDP's mixed precision does around each unit.
Tensor cast_forward(mnist::Net& net, Tensor x, std::optional<DType> output_dtype) {
  auto layer = [&](ts::nn::Module& module, const Tensor& input) {
    Tensor y = module(input.to(DType::f32));
    return output_dtype ? y.to(*output_dtype) : y;
  };
  x = ts::relu(layer(net.conv1, x));
  x = ts::max_pool2d(ts::relu(layer(net.conv2, x)), 2);
  x = ts::relu(layer(net.fc1, net.dropout1(x).flatten(1)));
  return ts::log_softmax(layer(net.fc2, net.dropout2(x)), 1);
}

Tensor step_loss(const Tensor& output, const Batch& batch, ts::data::RowRange rows) {
  return ts::nll_loss(output, batch.labels.narrow(0, rows.begin, rows.size()), {.reduction = ts::Reduction::sum}) /
         static_cast<double>(kGlobalBatch);
}

struct Run {
  std::vector<double> losses;
  ts::StateDict parameters;
};

// The hand-written truth: float64 master, float32 compute copy, SGD with momentum on the master.
Run reference_run(const std::vector<Batch>& batches, std::optional<DType> output_dtype) {
  mnist::Net master, compute;
  master.to(DType::f64);
  master.reset_parameters(kSeed);
  ts::optim::SGD optimizer(master.parameters(), {.lr = 0.05, .momentum = 0.9});
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    compute.load_state_dict(master.state_dict());  // rounds every master value to float32
    ts::nn::BatchScope scope({.seed = kSeed, .step = static_cast<uint64_t>(step), .first_row = 0});
    Tensor loss = step_loss(cast_forward(compute, batches[step].images, output_dtype), batches[step], {0, kGlobalBatch});
    loss.backward();
    std::vector<Tensor> masters = master.parameters(), computed = compute.parameters();
    for (size_t i = 0; i < masters.size(); ++i) {
      masters[i].set_grad(computed[i].grad().to(DType::f64));
      computed[i].set_grad(Tensor());
    }
    optimizer.step();
    run.losses.push_back(loss.detach().to(DType::f64).item<double>());
  }
  run.parameters = master.state_dict();
  return run;
}

Run sharded_run(const std::vector<Batch>& batches, const fsdp::MixedPrecision& policy) {
  const auto& world = dist_test::world();
  mnist::Net model;
  model.to(DType::f64);
  model.reset_parameters(kSeed);
  fsdp::fully_shard(model, world, {.gradient_reduction = ts::dist::ReduceOp::sum, .mixed_precision = policy});
  ts::optim::SGD optimizer(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  ts::data::RowRange rows = my_rows();
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    ts::nn::BatchScope scope({.seed = kSeed, .step = static_cast<uint64_t>(step), .first_row = rows.begin});
    optimizer.zero_grad();
    Tensor output = model(batches[step].images.narrow(0, rows.begin, rows.size()));
    Tensor loss = step_loss(output, batches[step], rows);
    loss.backward();
    optimizer.step();
    Tensor global = loss.detach().to(DType::f64);
    world->all_reduce(global);
    run.losses.push_back(global.item<double>());
  }
  run.parameters = model.state_dict();
  return run;
}

void check_against_reference(const fsdp::MixedPrecision& policy, const char* what) {
  const auto& world = dist_test::world();
  std::vector<Batch> batches = make_batches();
  Run sharded = sharded_run(batches, policy);
  // The truth is computed on rank 0 and broadcast.
  Run truth = world->rank() == 0 ? reference_run(batches, policy.output_dtype) : Run{};
  Tensor losses = world->rank() == 0 ? ts::tensor<double>(truth.losses) : ts::zeros({kSteps}, {.dtype = DType::f64});
  world->broadcast(losses, 0);
  truth.losses = losses.to_vector<double>();
  double worst_loss = 0, worst_parameter = 0;
  for (int step = 0; step < kSteps; ++step) {
    worst_loss = std::max(worst_loss, std::abs(sharded.losses[step] - truth.losses[step]) / std::abs(truth.losses[step]));
  }
  for (auto& [name, tensor] : sharded.parameters) {
    CHECK(tensor.dtype() == DType::f64);  // the state is the float64 master, not the float32 copy
    Tensor expected = world->rank() == 0 ? truth.parameters.at(name).contiguous() : ts::zeros_like(tensor);
    world->broadcast(expected, 0);
    worst_parameter = std::max(worst_parameter, relative_difference(tensor, expected));
  }
  if (world->rank() == 0) {
    MESSAGE(std::string(what), " at ", world->size(), " rank(s): worst loss error ", worst_loss, ", worst parameter error ",
            worst_parameter);
  }
  const double tolerance = world->size() == 1 ? 0.0 : 1e-5;
  CHECK(worst_loss <= tolerance);
  CHECK(worst_parameter <= tolerance);
}

}  // namespace

TEST_CASE("mixed precision: float32 compute on float64 shards, gradients reduced in float64") {
  check_against_reference({.param_dtype = DType::f32, .reduce_dtype = DType::f64}, "param f32, reduce f64");
}

TEST_CASE("mixed precision: gradients reduced in param_dtype (the default reduce_dtype)") {
  check_against_reference({.param_dtype = DType::f32}, "param f32, reduce f32");
}

TEST_CASE("mixed precision: output_dtype brings every unit's output back to float64") {
  check_against_reference({.param_dtype = DType::f32, .reduce_dtype = DType::f64, .output_dtype = DType::f64},
                          "param f32, output f64");
}

TEST_CASE("mixed precision: shards, gradients and optimizer state keep the master dtype") {
  const auto& world = dist_test::world();
  mnist::Net plain, model;
  plain.to(DType::f64);
  model.to(DType::f64);
  fsdp::fully_shard(plain, world);
  fsdp::fully_shard(model, world, {.mixed_precision = {.param_dtype = DType::f32}});
  // The initial state is the same float64 values with or without mixed precision.
  ts::StateDict expected = plain.state_dict(), full = model.state_dict();
  for (auto& [name, tensor] : expected) {
    CHECK(full.at(name).dtype() == DType::f64);
    CHECK(full.at(name).to_vector<double>() == tensor.to_vector<double>());
  }
  ts::optim::Adam optimizer(model.parameters(), {.lr = 1e-3});
  ts::Generator gen(3);
  Tensor images = ts::randn({4, 1, 28, 28}, gen, {.dtype = DType::f64});
  Tensor output = model(images);
  CHECK(output.dtype() == DType::f32);          // computed in param_dtype
  CHECK(model.fc2.weight.dtype() == DType::f32);  // the parameters are views of the float32 buffer
  ts::nll_loss(output, ts::randint(0, 10, {4}, gen)).backward();
  optimizer.step();
  for (const fsdp::UnitInfo& unit : fsdp::units(model)) {
    CHECK(unit.shard.dtype() == DType::f64);
    CHECK(unit.shard.grad().dtype() == DType::f64);
  }
  for (size_t i = 0; i < optimizer.params().size(); ++i) CHECK(optimizer.state(i).at("exp_avg").dtype() == DType::f64);
  // The unsharded buffers are float32: at most two units' worth of parameters (prefetch)
  // and one of gradients, each half of the float64 layout's size (largest_unit_bytes).
  fsdp::MemoryReport report = fsdp::memory_report(model);
  CHECK(report.peak_unsharded_parameter_bytes <= report.largest_unit_bytes);
  CHECK(report.peak_unsharded_gradient_bytes <= report.largest_unit_bytes / 2);
  CHECK(report.peak_unsharded_gradient_bytes > 0);
}

TEST_CASE("mixed precision: summon_full_params and apply work on the float64 values and write them back") {
  const auto& world = dist_test::world();
  mnist::Net model;
  model.to(DType::f64);
  fsdp::fully_shard(model, world, {.mixed_precision = {.param_dtype = DType::f32}});
  ts::StateDict before = model.state_dict();
  fsdp::apply(model, [](ts::nn::Module& module) {
    for (auto& [name, slot] : module.parameter_slots()) {
      if (name == "_flat_param") continue;  // the shard FSDP registered; the summoned parameters are hidden
      CHECK(slot->dtype() == DType::f64);
      slot->mul_(3.0);  // exact in float64; a float32 round trip would lose bits
    }
  });
  ts::StateDict after = model.state_dict();
  for (auto& [name, tensor] : before) {
    std::vector<double> values = tensor.to_vector<double>(), scaled = after.at(name).to_vector<double>();
    bool all_tripled = true;
    for (size_t i = 0; i < values.size(); ++i) all_tripled = all_tripled && scaled[i] == 3.0 * values[i];
    CHECK_MESSAGE(all_tripled, name);
  }
  // The next forward gathers the new values, rounded to float32: it equals a float32 model
  // loaded with them (eval: no dropout).
  mnist::Net rounded;
  rounded.load_state_dict(after);
  model.eval();
  rounded.eval();
  ts::Generator gen(5);
  Tensor images = ts::randn({2, 1, 28, 28}, gen, {.dtype = DType::f64});
  Tensor output = model(images);
  CHECK(output.dtype() == DType::f32);
  CHECK(output.to_vector<float>() == rounded(images.to(DType::f32)).to_vector<float>());
}

TEST_CASE("mixed precision: unsupported policies are refused before anything is sharded") {
  const auto& world = dist_test::world();
  auto error_of = dist_test::error_of;
  mnist::Net a, b, c;
  CHECK(error_of([&] {
          fsdp::fully_shard(a, world, {.strategy = fsdp::ShardingStrategy::no_shard,
                                       .mixed_precision = {.param_dtype = DType::bf16}});
        }).find("mixed precision needs a sharded strategy") != std::string::npos);
  CHECK_THROWS_AS(fsdp::fully_shard(b, world, {.mixed_precision = {.param_dtype = DType::i64}}), ts::DTypeError);
  CHECK(error_of([&] { fsdp::fully_shard(c, world, {.mixed_precision = {.reduce_dtype = DType::f64}}); })
            .find("needs param_dtype") != std::string::npos);
}
