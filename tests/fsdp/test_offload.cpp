// FSDP's CPU offload (CPUOffloadPolicy) with the CPU standing in for the device, under
// mpirun at 1 to 4 ranks: the compute device and the host are both the CPU, but the
// offloaded bytes come from the pinned host allocator and the rest from the CPU's, so the
// device boundary is checked by its bytes. On a GPU: tests/gpu/test_fsdp_offload_gpu.cpp.
//
// Offload moves bytes, not arithmetic: every op runs the same CPU kernel on the same
// values with it on or off, so losses, gradients and parameters must be bit-identical
// (float64 and float64 shards with float32 compute, Adam with weight decay, gradient
// clipping, dropout on).
#include <doctest/doctest.h>

#include <filesystem>
#include <unistd.h>

#include "../dist/dist_test_support.h"

namespace ts = tessera;
namespace fsdp = tessera::fsdp;
using ts::DType;
using ts::Tensor;

namespace {

constexpr int64_t kGlobalBatch = 12;
constexpr int kSteps = 4;
constexpr uint64_t kSeed = 31;

struct Mlp : ts::nn::Module {
  ts::nn::Linear fc1{24, 64}, fc2{64, 64}, fc3{64, 10};
  ts::nn::Dropout dropout{0.2};
  Mlp() { register_modules({{"fc1", fc1}, {"fc2", fc2}, {"dropout", dropout}, {"fc3", fc3}}); }
  Tensor forward(Tensor x) override {
    x = ts::relu(fc1(x));
    x = dropout(ts::relu(fc2(x)));
    return ts::log_softmax(fc3(x), 1);
  }
};

struct Data {
  std::vector<Tensor> inputs, labels;
};

Data make_data() {
  ts::Generator gen(kSeed);
  Data data;
  for (int i = 0; i < kSteps; ++i) {
    data.inputs.push_back(ts::randn({kGlobalBatch, 24}, gen, {.dtype = DType::f64}));
    data.labels.push_back(ts::randint(0, 10, {kGlobalBatch}, gen));
  }
  return data;
}

ts::data::RowRange my_rows() {
  const auto& world = dist_test::world();
  return ts::data::DistributedSampler{world->rank(), world->size()}.rows_of(kGlobalBatch);
}

ts::nn::ModuleHolder<Mlp> sharded_model(const fsdp::FullyShardOptions& options) {
  auto model = ts::nn::make_module<Mlp>();
  model->to(DType::f64);
  model->reset_parameters(kSeed);
  fsdp::fully_shard(*model, dist_test::world(), options);
  return model;
}

struct Run {
  std::vector<double> losses;
  std::vector<std::vector<double>> gradients;  // every unit's gradient shard, each step
  ts::StateDict parameters;                    // gathered, at the end
};

Run train(const fsdp::FullyShardOptions& options) {
  const Data data = make_data();
  const ts::data::RowRange rows = my_rows();
  auto model = sharded_model(options);
  ts::optim::AdamW optimizer(model->parameters(), {.lr = 1e-2, .weight_decay = 0.1});
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    ts::nn::BatchScope scope({.seed = kSeed, .step = static_cast<uint64_t>(step), .first_row = rows.begin});
    optimizer.zero_grad();
    Tensor loss = ts::nll_loss(model(data.inputs[step].narrow(0, rows.begin, rows.size())),
                               data.labels[step].narrow(0, rows.begin, rows.size()));
    loss.backward();
    fsdp::clip_grad_norm(*model, 0.5);
    for (const fsdp::UnitInfo& unit : fsdp::units(*model)) run.gradients.push_back(unit.shard.grad().to_vector<double>());
    optimizer.step();
    run.losses.push_back(loss.to(DType::f64).item<double>());
  }
  run.parameters = model->state_dict();
  return run;
}

void check_identical(const Run& offloaded, const Run& plain) {
  CHECK(offloaded.losses == plain.losses);
  CHECK(offloaded.gradients == plain.gradients);
  CHECK(offloaded.parameters.keys() == plain.parameters.keys());
  for (auto& [name, tensor] : plain.parameters) {
    CAPTURE(name);
    CHECK(offloaded.parameters.at(name).to_vector<double>() == tensor.to_vector<double>());
  }
}

int64_t shard_bytes(Mlp& model) {
  int64_t bytes = 0;
  for (const fsdp::UnitInfo& unit : fsdp::units(model)) bytes += static_cast<int64_t>(unit.shard.nbytes());
  return bytes;
}

}  // namespace

TEST_CASE("cpu offload: training is bit-identical with it on or off (float64; float32 compute)") {
  const fsdp::CPUOffloadPolicy pinned{}, pageable{.pin_memory = false};
  check_identical(train({.offload_policy = pinned}), train({}));
  check_identical(train({.offload_policy = pageable}), train({}));
  check_identical(train({.strategy = fsdp::ShardingStrategy::shard_grad_op, .prefetch = false, .offload_policy = pinned}),
                  train({.strategy = fsdp::ShardingStrategy::shard_grad_op, .prefetch = false}));
  const fsdp::MixedPrecision f32_compute{.param_dtype = DType::f32, .reduce_dtype = DType::f64};
  check_identical(train({.mixed_precision = f32_compute, .offload_policy = pinned}),
                  train({.mixed_precision = f32_compute}));
}

TEST_CASE("cpu offload: shards, gradients and optimizer state live in pinned memory, the rest on the device") {
  const Data data = make_data();
  const ts::data::RowRange rows = my_rows();
  // Bytes on the compute allocator (the CPU's) and on the pinned one, measured from the
  // start of the run, in fc2's forward (after FSDP gathered it) at the second step.
  struct Measured {
    int64_t compute = 0, pinned = 0, shards = 0, after_step_pinned = 0;
  };
  auto measure = [&](bool offload) {
    const int64_t compute_start = ts::memory_stats(ts::Device::cpu()).current_bytes;
    const int64_t pinned_start = ts::pinned_memory_stats().current_bytes;
    fsdp::FullyShardOptions options{.prefetch = false};  // no all-gather in flight at the hook
    if (offload) options.offload_policy = fsdp::CPUOffloadPolicy{};
    auto model = sharded_model(options);
    Measured measured;
    measured.shards = shard_bytes(*model);
    for (const fsdp::UnitInfo& unit : fsdp::units(*model)) CHECK(unit.shard.is_pinned() == offload);
    ts::optim::Adam optimizer(model->parameters(), {.lr = 1e-2});
    bool record = false;
    model->fc2.register_forward_hook([&](ts::nn::Module&, Tensor&) {
      if (!record) return;
      measured.compute = ts::memory_stats(ts::Device::cpu()).current_bytes - compute_start;
      measured.pinned = ts::pinned_memory_stats().current_bytes - pinned_start;
    });
    for (int step = 0; step < 2; ++step) {
      ts::nn::BatchScope scope({.seed = kSeed, .step = static_cast<uint64_t>(step), .first_row = rows.begin});
      optimizer.zero_grad();
      record = step == 1;
      Tensor loss = ts::nll_loss(model(data.inputs[step].narrow(0, rows.begin, rows.size())),
                                 data.labels[step].narrow(0, rows.begin, rows.size()));
      loss.backward();
      optimizer.step();
    }
    for (const fsdp::UnitInfo& unit : fsdp::units(*model)) {
      CHECK(unit.shard.grad().is_pinned() == offload);
      CHECK(optimizer.state(0).at("exp_avg").is_pinned() == offload);
    }
    measured.after_step_pinned = ts::pinned_memory_stats().current_bytes - pinned_start;
    const fsdp::MemoryReport report = fsdp::memory_report(*model);
    CHECK(report.offloaded == offload);
    CHECK((report.str().find("offloaded to the host") != std::string::npos) == offload);
    return measured;
  };
  const Measured plain = measure(false), offloaded = measure(true);
  CHECK(plain.shards == offloaded.shards);
  // In forward (gradients set to none): the shards and Adam's two state tensors per shard.
  const int64_t host_bytes = 3 * offloaded.shards;
  CHECK(plain.pinned == 0);
  CHECK(offloaded.pinned == host_bytes);
  CHECK(plain.compute - offloaded.compute == host_bytes);  // exactly what moved, nothing more
  // After the step the gradient shards are there too.
  CHECK(plain.after_step_pinned == 0);
  CHECK(offloaded.after_step_pinned == 4 * offloaded.shards);
}

TEST_CASE("cpu offload: a model whose training state does not fit under the device's limit trains offloaded") {
  if (dist_test::world()->size() != 1) return;  // a failure at one rank only would desynchronise the others
  const Data data = make_data();
  auto train_steps = [&](const fsdp::FullyShardOptions& options) {
    auto model = sharded_model(options);
    ts::optim::Adam optimizer(model->parameters(), {.lr = 1e-2});
    for (int step = 0; step < 2; ++step) {
      ts::nn::BatchScope scope({.seed = kSeed, .step = static_cast<uint64_t>(step), .first_row = 0});
      optimizer.zero_grad();
      ts::nll_loss(model(data.inputs[step]), data.labels[step]).backward();
      optimizer.step();
    }
  };
  // The compute allocator's peak over two steps, from where it stood before: with offload
  // the shards, gradients and Adam's state are elsewhere, leaving the gathered unit, its
  // gradient and the activations.
  auto peak_of = [&](const fsdp::FullyShardOptions& options) {
    const int64_t start = ts::memory_stats(ts::Device::cpu()).current_bytes;
    ts::reset_peak_memory(ts::Device::cpu());
    train_steps(options);
    return ts::memory_stats(ts::Device::cpu()).peak_bytes - start;
  };
  const fsdp::FullyShardOptions offloaded{.offload_policy = fsdp::CPUOffloadPolicy{}};
  const int64_t plain_peak = peak_of({}), offloaded_peak = peak_of(offloaded);
  const int64_t shards = shard_bytes(*sharded_model({}));
  const int64_t state = 4 * shards;  // shards, gradients, 2 x Adam
  MESSAGE("compute allocator peak: ", plain_peak, " bytes without offload, ", offloaded_peak, " with (training state ",
          state, " bytes)");
  // At one rank the plain run keeps no gathered copy (its shard is the gathered buffer), so
  // offload saves the training state less what offload itself puts on the compute device:
  // the shard's device copy for the all-gather, the gathered parameters and their unsharded
  // gradient, each at most the model's unsharded bytes (its shard bytes at one rank).
  CHECK(plain_peak - offloaded_peak >= state - 3 * shards);
  // A limit half way between: the plain run fails with the holders named, the offloaded one trains.
  ts::release_cached_memory(ts::Device::cpu());
  const int64_t held = ts::memory_stats(ts::Device::cpu()).reserved_bytes;
  ts::MemoryLimitGuard limit(ts::Device::cpu(), held + (plain_peak + offloaded_peak) / 2);
  const std::string error = dist_test::error_of([&] { train_steps({}); });
  CHECK(error.find("out of memory on cpu") != std::string::npos);
  CHECK(error.find("shard of FSDP unit") != std::string::npos);
  CHECK(dist_test::error_of([&] { train_steps(offloaded); }) == "");
}

TEST_CASE("cpu offload: sharded checkpoints save from and load into the host shards") {
  const auto& world = dist_test::world();
  Tensor id = ts::full({1}, static_cast<double>(getpid()), {.dtype = DType::i64});
  world->broadcast(id, 0);
  const std::string directory =
      (std::filesystem::temp_directory_path() / ("tessera-offload-" + std::to_string(id.item<int64_t>()) + "-" +
                                                 std::to_string(world->size())))
          .string();
  const Data data = make_data();
  const ts::data::RowRange rows = my_rows();
  const fsdp::FullyShardOptions options{.offload_policy = fsdp::CPUOffloadPolicy{}};
  auto model = sharded_model(options);
  ts::optim::Adam optimizer(model->parameters(), {.lr = 1e-2});
  auto step = [&](Mlp& m, ts::optim::Optimizer& opt, int i) {
    ts::nn::BatchScope scope({.seed = kSeed, .step = static_cast<uint64_t>(i), .first_row = rows.begin});
    opt.zero_grad();
    Tensor loss = ts::nll_loss(m(data.inputs[i].narrow(0, rows.begin, rows.size())),
                               data.labels[i].narrow(0, rows.begin, rows.size()));
    loss.backward();
    opt.step();
    return loss.item<double>();
  };
  step(*model, optimizer, 0);
  ts::checkpoint::save_sharded(directory, *model, {.optimizer = &optimizer}, {.step = 1});
  const double expected = step(*model, optimizer, 1);

  auto resumed = sharded_model(options);
  ts::optim::Adam resumed_optimizer(resumed->parameters(), {.lr = 1e-2});
  ts::checkpoint::load_sharded(directory, *resumed, {.optimizer = &resumed_optimizer});
  for (const fsdp::UnitInfo& unit : fsdp::units(*resumed)) CHECK(unit.shard.is_pinned());
  CHECK(resumed_optimizer.state(0).at("exp_avg").is_pinned());
  CHECK(step(*resumed, resumed_optimizer, 1) == expected);  // resumes exactly
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(directory);
}

TEST_CASE("cpu offload needs a sharded strategy") {
  Mlp model;
  const std::string error = dist_test::error_of([&] {
    fsdp::fully_shard(model, dist_test::world(),
                      {.strategy = fsdp::ShardingStrategy::no_shard, .offload_policy = fsdp::CPUOffloadPolicy{}});
  });
  CHECK(error.find("CPU offload needs a sharded strategy") != std::string::npos);
}
