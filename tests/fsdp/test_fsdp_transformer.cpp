// FSDP over a GPT-shaped model built from the transformer layers (Embedding, LayerNorm,
// GELU, Dropout, Linear; ModuleDict and ModuleList as nanoGPT lays them out), against the
// one-rank truth at 1 to 4 ranks, under each wrap policy. Rank 0 trains the plain model on
// the whole global batch and broadcasts its losses and state; every rank trains the
// sharded model on its rows (dropout masks keyed by global row) and compares. float64,
// Adam, tolerance 1e-10 normwise relative (as test_fsdp.cpp: the sharded run sums
// gradients over ranks in another order than the one-rank run sums over rows).
#include <doctest/doctest.h>

#include <cmath>

#include "../dist/dist_test_support.h"
#include "tiny_gpt.h"

namespace ts = tessera;
namespace fsdp = tessera::fsdp;
namespace nn = tessera::nn;
using ts::DType;
using ts::Tensor;
using fsdp_test::TinyGPT;
using test_support::relative_difference;

namespace {

constexpr int64_t kVocab = 11, kWidth = 8, kTokens = 5, kGlobalBatch = 12;
constexpr uint64_t kSeed = 5;

constexpr fsdp_test::TinyGPTConfig kModel{
    .vocab = kVocab, .width = kWidth, .tokens = kTokens, .layers = 2, .seed = kSeed};

struct Batch {
  Tensor ids, targets;
};

std::vector<Batch> make_data(int steps) {
  ts::Generator gen(kSeed);
  std::vector<Batch> data;
  for (int i = 0; i < steps; ++i) {
    data.push_back({ts::randint(0, kVocab, {kGlobalBatch, kTokens}, gen), ts::randint(0, kVocab, {kGlobalBatch, kTokens}, gen)});
  }
  return data;
}

// One Adam step on `rows` of the global batch; returns the global mean loss.
double train_step(TinyGPT& model, ts::optim::Optimizer& optimizer, const Batch& batch, int step,
                  ts::data::RowRange rows, ts::dist::ProcessGroup* group) {
  ts::nn::BatchScope scope({.seed = kSeed, .step = static_cast<uint64_t>(step), .first_row = rows.begin});
  optimizer.zero_grad();
  Tensor logits = model(batch.ids.narrow(0, rows.begin, rows.size()));
  Tensor targets = batch.targets.narrow(0, rows.begin, rows.size());
  Tensor loss = ts::cross_entropy(logits.reshape({-1, kVocab}), targets.reshape({-1}),
                                  {.reduction = ts::Reduction::sum}) /
                static_cast<double>(kGlobalBatch * kTokens);
  loss.backward();
  optimizer.step();
  Tensor global = loss.detach();
  if (group) group->all_reduce(global);
  return global.item<double>();
}

void check_parity(const fsdp::WrapPolicy& policy, const std::string& what) {
  CAPTURE(what);
  const auto& world = dist_test::world();
  const int steps = 4;
  std::vector<Batch> data = make_data(steps);

  // The one-rank truth, on rank 0, broadcast.
  TinyGPT reference(kModel);
  std::vector<double> losses(steps, 0.0);
  if (world->rank() == 0) {
    ts::optim::Adam optimizer(reference.parameters(), {.lr = 1e-2});
    for (int step = 0; step < steps; ++step) {
      losses[step] = train_step(reference, optimizer, data[step], step, {0, kGlobalBatch}, nullptr);
    }
  }
  Tensor loss_tensor = ts::tensor<double>(losses);
  world->broadcast(loss_tensor, 0);
  losses = loss_tensor.to_vector<double>();

  TinyGPT model(kModel);
  fsdp::fully_shard(model, world, {.wrap_policy = policy, .gradient_reduction = ts::dist::ReduceOp::sum});
  for (const fsdp::UnitInfo& unit : fsdp::units(model)) {
    CHECK(unit.name != "transformer.h");  // a container is never a unit
    CHECK(unit.name != "transformer");
  }
  ts::optim::Adam optimizer(model.parameters(), {.lr = 1e-2});
  const ts::data::RowRange rows = ts::data::DistributedSampler{world->rank(), world->size()}.rows_of(kGlobalBatch);
  double worst_loss = 0;
  for (int step = 0; step < steps; ++step) {
    const double loss = train_step(model, optimizer, data[step], step, rows, world.get());
    worst_loss = std::max(worst_loss, std::abs(loss - losses[step]) / std::abs(losses[step]));
  }
  double worst_parameter = 0;
  ts::StateDict full = model.state_dict();
  ts::StateDict expected = reference.state_dict();
  CHECK(full.keys() == expected.keys());
  CHECK(full.contains("transformer.h.1.ln_1.weight"));
  for (auto& [name, tensor] : expected) {
    Tensor truth = tensor.contiguous().clone();
    world->broadcast(truth, 0);
    worst_parameter = std::max(worst_parameter, relative_difference(full.at(name), truth));
  }
  if (world->rank() == 0) {
    MESSAGE(what, " at ", world->size(), " ranks: ", fsdp::units(model).size(), " units, worst loss error ", worst_loss,
            ", worst parameter error ", worst_parameter);
  }
  CHECK(worst_loss <= 1e-10);
  CHECK(worst_parameter <= 1e-10);
}

}  // namespace

TEST_CASE("a GPT of Embedding, LayerNorm, GELU and ModuleList blocks trains as on one rank") {
  check_parity(fsdp::WrapPolicy::owns_parameters(), "a unit per module with parameters");
  check_parity(fsdp::WrapPolicy::module_type({"Block"}), "a unit per Block");
  // Blocks hold 568 elements, the list of both 1136: size-based wrapping passes over the
  // ModuleList (and the ModuleDict) rather than making a unit that would never be called.
  check_parity(fsdp::WrapPolicy::size_based(1000), "size-based, over the containers");
}

TEST_CASE("a container named as a unit type is refused clearly") {
  TinyGPT model(kModel);
  const std::string message = dist_test::error_of(
      [&] { fsdp::fully_shard(model, dist_test::world(), {.wrap_policy = fsdp::WrapPolicy::module_type({"ModuleList"})}); });
  CHECK(test_support::contains(message, "'transformer.h' is a ModuleList, a container that is never called"));
}
