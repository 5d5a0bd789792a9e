// FSDP's schedule, measured: memory held per rank, bytes communicated per step, gradient
// accumulation without communication, gradient clipping across shards, and misuse.
#include <doctest/doctest.h>

#include <cmath>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <string>

#include "../../examples/mnist_net.h"
#include "../dist/dist_test_support.h"
#include "mnist_batch.h"

namespace ts = tessera;
namespace fsdp = tessera::fsdp;
using ts::DType;
using ts::Tensor;

namespace {

constexpr int64_t kGlobalBatch = 12;

using fsdp_test::Batch;
using fsdp_test::make_batch;

using dist_test::my_rows;

// Forward and backward on this rank's rows of `batch`, the summed loss divided by `divisor`.
void forward_backward(ts::nn::Module& model, const Batch& batch, double divisor, uint64_t step) {
  ts::data::RowRange rows = my_rows(batch.labels.size(0));
  ts::nn::BatchScope scope({.seed = 3, .step = step, .first_row = rows.begin});
  Tensor output = model(batch.images.narrow(0, rows.begin, rows.size()));
  Tensor loss = ts::nll_loss(output, batch.labels.narrow(0, rows.begin, rows.size()), {.reduction = ts::Reduction::sum});
  (loss / divisor).backward();
}

int64_t total_padded_bytes(ts::nn::Module& model) {
  int64_t bytes = 0;
  for (const fsdp::UnitInfo& unit : fsdp::units(model)) {
    bytes += unit.layout.padded_numel() * static_cast<int64_t>(element_size(unit.layout.dtype()));
  }
  return bytes;
}

}  // namespace

TEST_CASE("per-rank memory: shards of parameters, gradients and optimizer state, and at most two units gathered") {
  const auto& world = dist_test::world();
  const int n = world->size();
  Batch batch = make_batch(1, kGlobalBatch);
  int64_t baseline = ts::memory_stats().current_bytes;
  {
    mnist::Net model;  // deferred: nothing allocated yet
    CHECK(ts::memory_stats().current_bytes - baseline < 4096);
    fsdp::fully_shard(model, world);
    ts::optim::SGD optimizer(model.parameters(), {.lr = 0.01, .momentum = 0.9});
    for (uint64_t step = 0; step < 3; ++step) {
      optimizer.zero_grad(false);
      forward_backward(model, batch, kGlobalBatch, step);
      optimizer.step();
      if (step == 0) fsdp::reset_peak_unsharded(model);  // the first step records the order
    }
    // Now parameters, gradients and momentum exist, only as shards.
    int64_t parameters = 0;
    for (auto& [name, t] : mnist::Net().named_parameters()) parameters += t.numel();
    const int64_t model_state = parameters * 4 * 3;  // float32 parameters + gradients + momentum
    fsdp::MemoryReport report = fsdp::memory_report(model);
    const int64_t padding = 4 * 3 * (report.padding_elements + 4 * report.units);  // padding and alignment gaps
    int64_t persistent = ts::memory_stats().current_bytes - baseline;
    if (world->rank() == 0) MESSAGE(report.str());
    MESSAGE("rank ", world->rank(), ": persistent ", persistent, " bytes; model state / N = ", model_state / n);
    CHECK(persistent <= model_state / n + padding + 64 * 1024);
    CHECK(persistent >= model_state / n - 64 * 1024);
    CHECK(report.unsharded_parameter_bytes == 0);  // nothing left gathered between steps
    CHECK(report.unsharded_gradient_bytes == 0);
    // Steady state: the current unit and the prefetched next one, plus one gradient buffer.
    // One rank's shards are the whole parameters: nothing is gathered into a second copy.
    if (n == 1) {
      CHECK(report.peak_unsharded_parameter_bytes == 0);
    } else {
      CHECK(report.peak_unsharded_parameter_bytes <= 2 * report.largest_unit_bytes);
      CHECK(report.peak_unsharded_parameter_bytes > report.largest_unit_bytes);  // prefetch did overlap
    }
    CHECK(report.peak_unsharded_gradient_bytes <= report.largest_unit_bytes);
  }
  CHECK(ts::memory_stats().current_bytes - baseline == 0);
}

TEST_CASE("bytes communicated per step follow the strategy") {
  const auto& world = dist_test::world();
  Batch batch = make_batch(2, kGlobalBatch);
  struct Expectation {
    fsdp::ShardingStrategy strategy;
    int gathers_per_unit;
  };
  for (Expectation e : {Expectation{fsdp::ShardingStrategy::full_shard, 2},
                        Expectation{fsdp::ShardingStrategy::shard_grad_op, 1},
                        Expectation{fsdp::ShardingStrategy::no_shard, 0}}) {
    CAPTURE(static_cast<int>(e.strategy));
    mnist::Net model;
    fsdp::fully_shard(model, world, {.strategy = e.strategy});
    ts::optim::SGD optimizer(model.parameters(), {.lr = 0.01});
    forward_backward(model, batch, kGlobalBatch, 0);
    optimizer.step();
    fsdp::MemoryReport before = fsdp::memory_report(model);
    optimizer.zero_grad();
    forward_backward(model, batch, kGlobalBatch, 1);
    optimizer.step();
    fsdp::MemoryReport after = fsdp::memory_report(model);
    const int64_t flat = total_padded_bytes(model);
    const int units = after.units;
    CHECK(units == 4);
    // One rank gathers nothing whatever the strategy: its shard is the whole flat parameter.
    const int gathers_per_unit = world->size() == 1 ? 0 : e.gathers_per_unit;
    CHECK(after.all_gathers - before.all_gathers == gathers_per_unit * units);
    CHECK(after.all_gathered_bytes - before.all_gathered_bytes == gathers_per_unit * flat);
    CHECK(after.reduce_scatters - before.reduce_scatters == units);  // NO_SHARD: all-reduces
    CHECK(after.reduce_scattered_bytes - before.reduce_scattered_bytes == flat);
    // Units kept whole (NO_SHARD, and every strategy at one rank) all-reduce their gradients,
    // and the report's line says so, as PyTorch's FSDP (NO_SHARD at world size 1) would.
    const bool kept_whole = world->size() == 1 || e.strategy == fsdp::ShardingStrategy::no_shard;
    CHECK(after.all_reduces - before.all_reduces == (kept_whole ? units : 0));
    CHECK(after.all_reduced_bytes - before.all_reduced_bytes == (kept_whole ? flat : 0));
    auto mib = [](int64_t bytes) {  // as the line prints it
      std::ostringstream text;
      text << std::fixed << std::setprecision(3) << static_cast<double>(bytes) / (1024.0 * 1024.0);
      return text.str();
    };
    std::string expected;  // over both steps
    if (kept_whole) {
      expected = "all-reduced " + mib(2 * flat) + " MiB in " + std::to_string(2 * units) +
                 (world->size() == 1 ? " (one rank: NO_SHARD, nothing sent)" : "");
    } else {
      expected = "all-gathered " + mib(after.all_gathered_bytes) + " MiB in " + std::to_string(after.all_gathers) +
                 ", reduce-scattered " + mib(2 * flat) + " MiB in " + std::to_string(2 * units);
    }
    const std::string line = after.str();
    CAPTURE(line);
    const size_t communication = line.find(" MiB); ");  // after "(largest unit ... MiB); "
    REQUIRE(communication != std::string::npos);
    CHECK(line.substr(communication + 7) == expected);
  }
}

TEST_CASE("gradient accumulation over 3 micro-batches without communication equals one large batch") {
  const auto& world = dist_test::world();
  Batch micro[3] = {make_batch(10, kGlobalBatch, DType::f64), make_batch(11, kGlobalBatch, DType::f64),
                    make_batch(12, kGlobalBatch, DType::f64)};
  Batch large{ts::cat({micro[0].images, micro[1].images, micro[2].images}),
              ts::cat({micro[0].labels, micro[1].labels, micro[2].labels})};
  auto make_model = [&](mnist::Net& model) {
    model.to(DType::f64);
    model.eval();  // dropout keyed by row would differ between the two row numberings
    fsdp::fully_shard(model, world, {.gradient_reduction = ts::dist::ReduceOp::sum});
  };
  mnist::Net accumulated, single;
  make_model(accumulated);
  make_model(single);

  {
    fsdp::NoSyncScope no_sync(accumulated);
    int64_t reductions = fsdp::memory_report(accumulated).reduce_scatters;
    forward_backward(accumulated, micro[0], 3 * kGlobalBatch, 0);
    forward_backward(accumulated, micro[1], 3 * kGlobalBatch, 0);
    CHECK(fsdp::memory_report(accumulated).reduce_scatters == reductions);  // nothing communicated
    for (Tensor& shard : accumulated.parameters()) CHECK_FALSE(shard.grad().defined());
  }
  forward_backward(accumulated, micro[2], 3 * kGlobalBatch, 0);
  // The single large batch: every rank takes its rows of each micro-batch, as above.
  for (int i = 0; i < 3; ++i) forward_backward(single, micro[i], 3 * kGlobalBatch, 0);

  std::vector<Tensor> a = accumulated.parameters(), b = single.parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    Tensor diff = a[i].grad() - b[i].grad();
    double scale = std::sqrt((b[i].grad() * b[i].grad()).sum().item<double>());
    CHECK(std::sqrt((diff * diff).sum().item<double>()) <= 1e-12 * scale);
  }
  // And against one backward over all rows at once, on the plain model.
  mnist::Net plain;
  plain.to(DType::f64);
  plain.eval();
  ts::nll_loss(plain(large.images), large.labels).backward();
  ts::StateDict plain_grads;
  for (auto& [name, p] : plain.named_parameters()) plain_grads.insert(name, p.grad());
  fsdp::SummonFullParams full(accumulated, false);
  for (const fsdp::UnitInfo& unit : fsdp::units(accumulated)) {
    std::vector<double> shard_grad = unit.shard.grad().to_vector<double>();
    for (size_t i = 0; i < unit.layout.entries().size(); ++i) {
      const fsdp::FlatEntry& entry = unit.layout.entries()[i];
      fsdp::ElementRange part = unit.layout.overlap(i, unit.range);
      std::vector<double> expected = plain_grads.at(entry.name).contiguous().view({-1}).to_vector<double>();
      double worst = 0;
      for (int64_t e = part.begin; e < part.end; ++e) {
        double got = shard_grad[static_cast<size_t>(e - unit.range.begin)];
        double want = expected[static_cast<size_t>(e - entry.offset)];
        worst = std::max(worst, std::abs(got - want) / (1e-3 + std::abs(want)));
      }
      CAPTURE(entry.name);
      CHECK(worst <= 1e-10);
    }
  }
}

TEST_CASE("clip_grad_norm across shards equals the one-rank norm, with clipping active") {
  const auto& world = dist_test::world();
  Batch batch = make_batch(20, kGlobalBatch, DType::f64);
  mnist::Net plain, sharded;
  plain.to(DType::f64);
  sharded.to(DType::f64);
  fsdp::fully_shard(sharded, world, {.gradient_reduction = ts::dist::ReduceOp::sum});
  {
    ts::nn::BatchScope scope({.seed = 3, .step = 0, .first_row = 0});
    (ts::nll_loss(plain(batch.images), batch.labels, {.reduction = ts::Reduction::sum}) / kGlobalBatch).backward();
  }
  forward_backward(sharded, batch, kGlobalBatch, 0);
  const double max_norm = 0.05;
  double expected = ts::nn::clip_grad_norm(plain.parameters(), max_norm);
  double norm = fsdp::clip_grad_norm(sharded, max_norm);
  CHECK(expected > 10 * max_norm);  // clipping is really active
  CHECK(std::abs(norm - expected) <= 1e-12 * expected);
  // The clipped gradients: one SGD step on each, then compare the parameters.
  ts::optim::SGD(plain.parameters(), {.lr = 1.0}).step();
  ts::optim::SGD(sharded.parameters(), {.lr = 1.0}).step();
  ts::StateDict a = sharded.state_dict(), b = plain.state_dict();
  for (auto& [name, tensor] : b) {
    Tensor diff = a.at(name) - tensor;
    CHECK(std::sqrt((diff * diff).sum().item<double>()) <= 1e-12 * std::sqrt((tensor * tensor).sum().item<double>()));
  }
}

TEST_CASE("misuse: sharding twice, and using a parameter outside its unit") {
  const auto& world = dist_test::world();
  mnist::Net model;
  fsdp::fully_shard(model, world);
  std::string twice = dist_test::error_of([&] { fsdp::fully_shard(model, world); });
  CHECK(twice.find("already sharded") != std::string::npos);
  // At every world size, one rank's too (its shards are the whole parameters, not shown outside a unit).
  std::string outside = dist_test::error_of([&] { model.fc1.weight.to_vector<float>(); });
  CHECK(outside.find("no memory") != std::string::npos);
  std::string not_sharded = dist_test::error_of([&] {
    mnist::Net plain;
    fsdp::clip_grad_norm(plain, 1.0);
  });
  CHECK(not_sharded.find("not sharded") != std::string::npos);
}

TEST_CASE("process_group, replica_group and reshard: what code outside FSDP may ask of a sharded model") {
  const auto& world = dist_test::world();
  mnist::Net model;
  for (auto call : std::vector<std::function<void()>>{[&] { fsdp::process_group(model); },
                                                     [&] { fsdp::replica_group(model); },
                                                     [&] { fsdp::reshard(model); }}) {
    CHECK(dist_test::error_of(call).find("not sharded") != std::string::npos);
  }
  fsdp::fully_shard(model, world, {.strategy = fsdp::ShardingStrategy::shard_grad_op});
  CHECK(&fsdp::process_group(model) == world.get());
  CHECK(fsdp::replica_group(model) == nullptr);  // no mesh
  // SHARD_GRAD_OP keeps every unit gathered from its forward to its backward; reshard() frees
  // them all (one rank holds nothing gathered: its shards are the whole parameters).
  Batch batch = make_batch(4, kGlobalBatch);
  ts::data::RowRange rows = my_rows(kGlobalBatch);
  Tensor output = model(batch.images.narrow(0, rows.begin, rows.size()));
  const int64_t gathered = fsdp::memory_report(model).unsharded_parameter_bytes;
  CHECK(gathered == (world->size() == 1 ? 0 : total_padded_bytes(model)));
  fsdp::reshard(model);
  CHECK(fsdp::memory_report(model).unsharded_parameter_bytes == 0);
}

TEST_CASE("summon_full_params and fsdp::apply give full parameters and write changes back") {
  const auto& world = dist_test::world();
  mnist::Net model;
  model.to(DType::f64);
  ts::StateDict expected = [] {
    mnist::Net plain;
    plain.to(DType::f64);
    return plain.state_dict();
  }();
  fsdp::fully_shard(model, world);
  {
    fsdp::SummonFullParams full(model);
    CHECK(model.fc2.weight.to_vector<double>() == expected.at("fc2.weight").to_vector<double>());
    ts::NoGradGuard no_grad;
    model.fc2.bias.fill_(0.25);
  }
  fsdp::apply(model, [](ts::nn::Module& m) {
    if (auto* linear = dynamic_cast<ts::nn::Linear*>(&m)) linear->weight.mul_(2.0);
  });
  ts::StateDict after = model.state_dict();
  CHECK(after.at("fc2.bias").to_vector<double>() == std::vector<double>(10, 0.25));
  Tensor doubled = expected.at("fc1.weight") * 2.0;
  CHECK(after.at("fc1.weight").to_vector<double>() == doubled.to_vector<double>());
  CHECK(after.at("conv1.weight").to_vector<double>() == expected.at("conv1.weight").to_vector<double>());
  // A full state dict loads back at any world size: every rank keeps its slice.
  mnist::Net other;
  other.to(DType::f64);
  fsdp::fully_shard(other, world);
  other.load_state_dict(after);
  ts::StateDict reloaded = other.state_dict();
  for (auto& [name, tensor] : after) CHECK(reloaded.at(name).to_vector<double>() == tensor.to_vector<double>());
}

TEST_CASE("summon_full_params: end() reports a failed writeback; while another exception unwinds, that one wins") {
  const auto& world = dist_test::world();
  mnist::Net model;
  fsdp::fully_shard(model, world);
  // A parameter given data of another shape cannot be written back into its shard.
  auto break_writeback = [&] { model.fc2.bias.set_data(ts::zeros({3})); };
  {
    fsdp::SummonFullParams full(model);
    break_writeback();
    CHECK_THROWS_AS(full.end(), ts::ShapeError);
  }  // ended: the destructor does nothing more
  // The user's exception propagates, instead of std::terminate for a second one.
  try {
    fsdp::SummonFullParams full(model);
    break_writeback();
    throw std::runtime_error("the user's failure");
  } catch (const std::runtime_error& error) {
    CHECK(std::string(error.what()) == "the user's failure");
  }
  // Without end() and without another exception, the destructor throws the failure itself.
  auto destroy = [&] {
    fsdp::SummonFullParams full(model);
    break_writeback();
  };
  CHECK_THROWS_AS(destroy(), ts::ShapeError);
}
