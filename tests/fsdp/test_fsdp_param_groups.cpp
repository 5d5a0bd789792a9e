// Parameter groups under flat shards, run under mpirun with 1 to 4 ranks (3 pads units).
//
// The golden configurations of tests/optim/param_groups_golden.h (PyTorch 1.13's groups
// and schedules) on the same model fully sharded: groups given by the original parameters
// (collected before fully_shard, or from fsdp::named_original_parameters after), each
// unit's flat shard mixing both groups. Every rank's flat gradient is set from the golden
// gradients, so the optimizer sees PyTorch's gradients and must reproduce PyTorch's
// parameters and state bit for bit (tolerance 0: the update is element-wise and each
// segment gets its group's scalars, whatever the world size). Also: an optimizer built
// before fully_shard, nn::clip_grad_norm on a sharded model, real training against the
// one-rank run (tolerance 1e-10: gradients are reduced in another order there), and
// checkpoints of groups and schedules loaded at any world size.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "../../examples/mnist_net.h"
#include "../dist/dist_test_support.h"
#include "../optim/param_groups_golden.h"

namespace ts = tessera;
namespace fsdp = tessera::fsdp;
namespace ckpt = tessera::checkpoint;
namespace pg = param_groups_golden;
using ts::DType;
using ts::Tensor;

namespace {

// Every unit's flat shard gradient on this rank, from the golden's gradients of `step`
// (zero in the gaps and the padding).
void set_shard_gradients(pg::Net& net, const std::string& dtype_name, int step) {
  ts::NoGradGuard no_grad;
  for (const fsdp::UnitInfo& unit : fsdp::units(net)) {
    Tensor flat = ts::zeros({unit.layout.padded_numel()}, {.dtype = unit.layout.dtype()});
    for (const fsdp::FlatEntry& entry : unit.layout.entries()) {
      const Tensor& grad = pg::golden().at("inputs." + dtype_name + ".grad." + std::to_string(step) + "." + entry.name);
      flat.narrow(0, entry.offset, entry.numel).copy_(grad.reshape({-1}));
    }
    Tensor shard = unit.shard;
    shard.set_grad(flat.narrow(0, unit.range.begin, unit.range.size()).clone());
  }
}

// This rank's elements of every shard that no parameter covers: the gaps and the padding.
bool gaps_and_padding_are_zero(pg::Net& net) {
  bool zero = true;
  for (const fsdp::UnitInfo& unit : fsdp::units(net)) {
    std::vector<double> values = unit.shard.to(DType::f64).to_vector<double>();
    std::vector<bool> used(values.size(), false);
    for (size_t i = 0; i < unit.layout.entries().size(); ++i) {
      fsdp::ElementRange part = unit.layout.overlap(i, unit.range);
      for (int64_t e = part.begin; e < part.end; ++e) used[static_cast<size_t>(e - unit.range.begin)] = true;
    }
    for (size_t e = 0; e < values.size(); ++e) zero = zero && (used[e] || (values[e] == 0.0 && !std::signbit(values[e])));
  }
  return zero;
}

enum class Built { before_fully_shard, after_with_handles, after_from_named_original_parameters };

// Runs golden configuration `config` on the sharded model for `steps` steps from
// `first_step`, comparing parameters, each rank's state segments, rates and param_groups
// with PyTorch's after every step; returns the number of mismatching tensors.
struct ShardedRun {
  pg::Net net;
  pg::Params params;
  pg::Run run;

  ShardedRun(const pg::Config& config, const std::string& dtype_name, Built built) : net(dtype_name) {
    const auto& world = dist_test::world();
    if (built == Built::before_fully_shard) {
      for (auto& [name, p] : net.named_parameters()) params[name] = p;
      run = config.make(params);
      fsdp::fully_shard(net, world);
    } else if (built == Built::after_with_handles) {
      for (auto& [name, p] : net.named_parameters()) params[name] = p;
      fsdp::fully_shard(net, world);
      run = config.make(params);
    } else {
      fsdp::fully_shard(net, world);
      for (auto& [name, p] : fsdp::named_original_parameters(net)) params[name] = p;
      run = config.make(params);
    }
  }

  int steps(const std::string& name, const std::string& dtype_name, int first_step, int count) {
    const ts::StateDict& file = pg::golden();
    const std::string prefix = name + "." + dtype_name + ".";
    int mismatches = 0;
    for (int step = first_step; step < first_step + count; ++step) {
      if (step == run.add_at) run.add_group();
      set_shard_gradients(net, dtype_name, step);
      run.optimizer->step();
      if (run.schedule() != nullptr) {
        run.schedule()->step();
        const auto lrs = file.at(prefix + "lr").to_vector<double>();
        for (size_t g = 0; g < run.optimizer->param_group_count(); ++g) {
          mismatches += run.optimizer->lr(g) != lrs[static_cast<size_t>(step) * run.optimizer->param_group_count() + g];
        }
      }
      const std::string at = prefix + "step" + std::to_string(step) + ".";
      ts::StateDict full = net.state_dict();  // gathered: PyTorch's names and shapes
      for (const std::string& param : pg::kNames) mismatches += !pg::same_bits(full.at(param), file.at(at + "param." + param));
      const std::vector<Tensor>& order = run.optimizer->params();
      for (size_t i = 0; i < order.size(); ++i) {
        const ts::nn::ShardedParameter* mark = ts::nn::find_sharded_parameter(order[i]);
        CHECK(mark != nullptr);
        if (mark == nullptr) return mismatches + 1;
        for (const auto& [state, value] : run.optimizer->state(i)) {
          const std::string key = at + state + "." + mark->name;
          CHECK_MESSAGE(file.contains(key), key);
          if (!file.contains(key)) continue;
          const Tensor& expected = file.at(key);
          // This rank's segment of the state: elements [first_element, + numel) of the parameter's.
          Tensor mine = expected.dim() == 0 ? expected
                                            : expected.reshape({-1}).narrow(0, mark->first_element, mark->numel);
          mismatches += !pg::same_bits(value, mine);
        }
      }
    }
    return mismatches;
  }
};

// A directory every rank sees: rank 0 makes it and broadcasts its name.
std::string shared_directory(const std::string& tag) {
  const auto& world = dist_test::world();
  Tensor name = ts::zeros({512}, {.dtype = DType::u8});
  if (world->rank() == 0) {
    std::string pattern = (std::filesystem::temp_directory_path() / ("tessera-groups-" + tag + "-XXXXXX")).string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    for (size_t i = 0; i < pattern.size(); ++i) name.data_ptr<uint8_t>()[i] = static_cast<uint8_t>(pattern[i]);
  }
  world->broadcast(name, 0);
  return std::string(reinterpret_cast<const char*>(name.data_ptr<uint8_t>()));
}

}  // namespace

TEST_CASE("parameter groups over flat shards match PyTorch 1.13 bit for bit at every world size") {
  const auto& world = dist_test::world();
  int mismatches = 0, runs = 0;
  for (const pg::Config& config : pg::configs()) {
    for (const std::string dtype_name : {"f32", "f64"}) {
      CAPTURE(config.name);
      CAPTURE(dtype_name);
      // Half the runs collect the original parameters before fully_shard, half after.
      const Built built = runs++ % 2 == 0 ? Built::after_with_handles : Built::after_from_named_original_parameters;
      ShardedRun sharded(config, dtype_name, built);
      const int wrong = sharded.steps(config.name, dtype_name, 0, pg::kSteps);
      CHECK(wrong == 0);
      mismatches += wrong;
      CHECK(gaps_and_padding_are_zero(sharded.net));
      pg::check_param_groups(*sharded.run.optimizer, config.name + "." + dtype_name + ".param_groups.");
    }
  }
  if (world->rank() == 0) MESSAGE(runs, " runs at ", world->size(), " rank(s): ", mismatches, " tensors differ from PyTorch's");
}

TEST_CASE("an optimizer built before fully_shard steps the shards; one that already stepped is refused by name") {
  const auto& world = dist_test::world();
  const std::vector<pg::Config> configs = pg::configs();
  const pg::Config& nanogpt = configs.front();
  REQUIRE(nanogpt.name == "adamw_nanogpt");
  ShardedRun before(nanogpt, "f64", Built::before_fully_shard);
  CHECK(before.steps(nanogpt.name, "f64", 0, pg::kSteps) == 0);

  // Stepped on the full parameters, then sharded: its state no longer fits the segments.
  pg::Net net("f64");
  pg::Params params;
  for (auto& [name, p] : net.named_parameters()) params[name] = p;
  pg::Run run = nanogpt.make(params);
  for (const std::string& name : pg::kNames) params[name].set_grad(ts::ones_like(params[name]));
  run.optimizer->step();
  fsdp::fully_shard(net, world);
  set_shard_gradients(net, "f64", 0);
  const std::string error = dist_test::error_of([&] { run.optimizer->step(); });
  CHECK(test_support::contains(error, "AdamW.step: parameter 0 ('a.weight' [3, 5])"));
  CHECK(test_support::contains(error, "fsdp::fully_shard sharded it after this optimizer had stepped it"));
  CHECK(test_support::contains(error, "Build the optimizer after fully_shard"));

  // The flat shards and the original parameters inside them together: refused.
  const std::string both = dist_test::error_of([&] {
    ts::optim::SGD sgd(std::vector<Tensor>{params.at("a.bias"), fsdp::units(net).front().shard}, {.lr = 0.1});
  });
  CHECK(test_support::contains(both, "lives in the flat shard 'a._flat_param'"));
}

TEST_CASE("nn::clip_grad_norm refuses a sharded model and names fsdp::clip_grad_norm") {
  const auto& world = dist_test::world();
  pg::Net net("f64");
  fsdp::fully_shard(net, world);
  set_shard_gradients(net, "f64", 0);
  const std::string flat = dist_test::error_of([&] { ts::nn::clip_grad_norm(net.parameters(), 1.0); });
  CHECK(test_support::contains(flat, "is the flat shard '"));
  CHECK(test_support::contains(flat, "fsdp::clip_grad_norm(model, max_norm)"));
  std::vector<Tensor> originals;
  for (auto& [name, p] : fsdp::named_original_parameters(net)) originals.push_back(p);
  const std::string original = dist_test::error_of([&] { ts::nn::clip_grad_norm(originals, 1.0); });
  CHECK(test_support::contains(original, "parameter 0 is the original parameter 'scale'"));
  // fsdp::clip_grad_norm gives the norm of the full gradient, as one process would.
  double squares = 0;
  for (const std::string& name : pg::kNames) {
    Tensor g = pg::golden().at("inputs.f64.grad.0." + name);
    squares += (g * g).sum().item<double>();
  }
  CHECK(fsdp::clip_grad_norm(net, 1e9) == doctest::Approx(std::sqrt(squares)).epsilon(1e-14));

  // NO_SHARD keeps every flat parameter whole on every rank: its norm is the full one.
  pg::Net replicated("f64");
  fsdp::fully_shard(replicated, world, {.strategy = fsdp::ShardingStrategy::no_shard});
  set_shard_gradients(replicated, "f64", 0);
  CHECK(ts::nn::clip_grad_norm(replicated.parameters(), 1e9) == doctest::Approx(std::sqrt(squares)).epsilon(1e-14));
}

TEST_CASE("nanoGPT's groups and warmup-cosine schedule train the MNIST network as one rank does") {
  // AdamW over the original parameters: weight decay on the 2-D and 4-D weights only.
  const auto& world = dist_test::world();
  constexpr int64_t kBatch = 12;
  constexpr int kSteps = 6;
  const auto [images, labels] = test_support::random_image_batches(11, kSteps, kBatch, {1, 28, 28}, 10, DType::f64);
  auto train = [&](mnist::Net& model, const std::vector<std::pair<std::string, Tensor>>& named, ts::data::RowRange rows,
                   ts::dist::ProcessGroup* group) {
    std::vector<Tensor> decay, no_decay;
    for (const auto& [name, p] : named) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    ts::optim::AdamW adamw({{decay, {.weight_decay = 0.1}}, {no_decay, {.weight_decay = 0.0}}},
                           {.lr = 3e-3, .betas = {0.9, 0.95}});
    ts::optim::LinearLR warmup(adamw, {.start_factor = 0.2, .total_iters = 2});
    ts::optim::CosineAnnealingLR cosine(adamw, kSteps - 2, 3e-4);
    ts::optim::SequentialLR schedule(adamw, {warmup, cosine}, {2});
    std::vector<double> losses;
    for (int step = 0; step < kSteps; ++step) {
      ts::nn::BatchScope scope({.seed = 3, .step = static_cast<uint64_t>(step), .first_row = rows.begin});
      adamw.zero_grad();
      Tensor loss = ts::nll_loss(model(images[step].narrow(0, rows.begin, rows.size())),
                                 labels[step].narrow(0, rows.begin, rows.size()), {.reduction = ts::Reduction::sum}) /
                    static_cast<double>(kBatch);
      loss.backward();
      adamw.step();
      schedule.step();
      Tensor global = loss.detach().clone();
      if (group != nullptr) group->all_reduce(global);
      losses.push_back(global.item<double>());
    }
    return losses;
  };

  mnist::Net plain;
  plain.to(DType::f64);
  plain.reset_parameters(3);
  std::vector<double> expected(kSteps, 0.0);
  if (world->rank() == 0) expected = train(plain, plain.named_parameters(), {0, kBatch}, nullptr);
  Tensor shared = ts::tensor<double>(expected);
  world->broadcast(shared, 0);
  expected = shared.to_vector<double>();

  mnist::Net sharded;
  sharded.to(DType::f64);
  sharded.reset_parameters(3);
  fsdp::fully_shard(sharded, world, {.gradient_reduction = ts::dist::ReduceOp::sum});
  const ts::data::RowRange rows = ts::data::DistributedSampler{world->rank(), world->size()}.rows_of(kBatch);
  std::vector<double> losses = train(sharded, fsdp::named_original_parameters(sharded), rows, world.get());
  double worst = 0;
  for (int step = 0; step < kSteps; ++step) worst = std::max(worst, std::abs(losses[step] - expected[step]) / expected[step]);
  ts::StateDict full = sharded.state_dict();
  for (auto& [name, tensor] : plain.state_dict()) {
    Tensor reference = tensor.contiguous().clone();
    world->broadcast(reference, 0);
    Tensor diff = full.at(name) - reference;
    worst = std::max(worst, std::sqrt((diff * diff).sum().item<double>() / (reference * reference).sum().item<double>()));
  }
  if (world->rank() == 0) MESSAGE("worst relative difference from one rank at ", world->size(), " rank(s): ", worst);
  CHECK(worst <= 1e-10);
}

TEST_CASE("checkpoints keep parameter groups, state segments and schedules, and load at any world size") {
  const auto& world = dist_test::world();
  const std::vector<pg::Config> configs = pg::configs();
  const pg::Config* config = nullptr;
  for (const pg::Config& c : configs) config = c.name == "adamw_warmup_cosine" ? &c : config;
  REQUIRE(config != nullptr);
  const std::string dir = shared_directory("ckpt");
  ShardedRun saved(*config, "f64", Built::after_from_named_original_parameters);
  CHECK(saved.steps(config->name, "f64", 0, 3) == 0);
  const ckpt::Stateful with{.optimizer = saved.run.optimizer.get(), .scheduler = saved.run.schedule()};
  ckpt::save_sharded(dir + "/saved", saved.net, with, {.step = 3});
  ckpt::save_full(dir + "/full.safetensors", saved.net, with, {.step = 3});
  if (world->rank() == 0) {  // the same checkpoint laid out for 1 to 4 ranks, offline
    ckpt::ShardedCheckpoint source(dir + "/saved");
    for (int w = 1; w <= 4; ++w) ckpt::write_sharded(source, dir + "/for-" + std::to_string(w), w);
  }
  world->barrier();

  const ts::StateDict optimizer_state = saved.run.optimizer->state_dict();
  const ts::StateDict schedule_state = saved.run.schedule()->state_dict();
  std::vector<std::string> sources{dir + "/saved", dir + "/full.safetensors"};
  for (int w = 1; w <= 4; ++w) sources.push_back(dir + "/for-" + std::to_string(w));
  for (const std::string& path : sources) {
    CAPTURE(path);
    ShardedRun resumed(*config, "f64", Built::after_with_handles);
    ckpt::TrainingState state =
        ckpt::load(path, resumed.net, {.optimizer = resumed.run.optimizer.get(), .scheduler = resumed.run.schedule()});
    CHECK(state.step == 3);
    // This rank's state segments, every group's hyper-parameters and the schedule: exact.
    const ts::StateDict loaded = resumed.run.optimizer->state_dict();
    CHECK(loaded.keys() == optimizer_state.keys());
    for (const auto& [key, value] : optimizer_state) CHECK_MESSAGE(pg::same_bits(loaded.at(key), value), key);
    CHECK(resumed.run.schedule()->state_dict().keys() == schedule_state.keys());
    for (const auto& [key, value] : schedule_state) {
      CHECK_MESSAGE(pg::same_bits(resumed.run.schedule()->state_dict().at(key), value), key);
    }
    // And the run goes on as PyTorch's did.
    CHECK(resumed.steps(config->name, "f64", 3, pg::kSteps - 3) == 0);
  }

  // A checkpoint of other groups is refused, naming them.
  const pg::Config& sgd = configs[2];
  ShardedRun other(sgd, "f64", Built::after_with_handles);
  const std::string error = dist_test::error_of([&] {
    ckpt::load_sharded(dir + "/saved", other.net, {.optimizer = other.run.optimizer.get()});
  });
  CHECK(test_support::contains(error, "the checkpoint holds AdamW state, but the optimizer is SGD"));
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(dir);
}
