// Activation checkpointing under FSDP (FullyShardOptions::activation_checkpointing), under
// mpirun at 1 to 4 ranks: a GPT-shaped model with dropout trained with every Block
// checkpointed gives bit-identical losses and parameters to the same sharded run without
// checkpointing, whatever the units (a unit per Block, units nested inside the checkpointed
// Blocks), with and without prefetch, SHARD_GRAD_OP, and hybrid sharding at 4 ranks; and it
// gathers no unit more often than FULL_SHARD does anyway (each checkpointed unit is gathered
// once for forward and once for its recomputation and backward).
#include <doctest/doctest.h>

#include <cstring>

#include "../dist/dist_test_support.h"
#include "tiny_gpt.h"

namespace ts = tessera;
namespace fsdp = tessera::fsdp;
namespace nn = tessera::nn;
using ts::DType;
using ts::Tensor;
using fsdp_test::TinyGPT;

namespace {

constexpr int64_t kVocab = 13, kWidth = 8, kTokens = 6, kGlobalBatch = 8;
constexpr uint64_t kSeed = 21;
constexpr int kSteps = 3;

constexpr fsdp_test::TinyGPTConfig kModel{
    .vocab = kVocab, .width = kWidth, .tokens = kTokens, .layers = 3, .inner_dropout = 0.2, .seed = kSeed};

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor ca = a.detach().contiguous(), cb = b.detach().contiguous();
  return ca.numel() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

struct Run {
  std::vector<double> losses;
  ts::StateDict state;
  fsdp::MemoryReport report;
};

// kSteps AdamW steps of the sharded model on this rank's rows of one global batch.
Run train(const fsdp::FullyShardOptions& options, std::shared_ptr<ts::dist::DeviceMesh> mesh) {
  const auto& world = dist_test::world();
  TinyGPT model(kModel);
  if (mesh) {
    fsdp::fully_shard(model, mesh, options);
  } else {
    fsdp::fully_shard(model, world, options);
  }
  ts::optim::AdamW optimizer(model.parameters(), {.lr = 1e-2});
  const ts::data::RowRange rows = ts::data::DistributedSampler{world->rank(), world->size()}.rows_of(kGlobalBatch);
  ts::Generator gen(kSeed);
  Tensor ids = ts::randint(0, kVocab, {kGlobalBatch, kTokens}, gen);  // one batch: the loss falls
  Tensor targets = ts::randint(0, kVocab, {kGlobalBatch, kTokens}, gen);
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    nn::BatchScope scope({.seed = kSeed, .step = static_cast<uint64_t>(step), .first_row = rows.begin});
    optimizer.zero_grad();
    Tensor logits = model(ids.narrow(0, rows.begin, rows.size()));
    Tensor loss = ts::cross_entropy(logits.reshape({-1, kVocab}), targets.narrow(0, rows.begin, rows.size()).reshape({-1}),
                                    {.reduction = ts::Reduction::sum}) /
                  static_cast<double>(kGlobalBatch * kTokens);
    loss.backward();
    optimizer.step();
    Tensor global = loss.detach();
    world->all_reduce(global);
    run.losses.push_back(global.item<double>());
  }
  run.report = fsdp::memory_report(model);
  run.state = model.state_dict();
  return run;
}

void check_bit_identical(fsdp::FullyShardOptions options, std::shared_ptr<ts::dist::DeviceMesh> mesh,
                         const std::string& what) {
  CAPTURE(what);
  options.gradient_reduction = ts::dist::ReduceOp::sum;
  const Run plain = train(options, mesh);
  options.activation_checkpointing = {"Block"};
  const Run checkpointed = train(options, mesh);
  REQUIRE(plain.losses.size() == checkpointed.losses.size());
  for (size_t i = 0; i < plain.losses.size(); ++i) {
    CAPTURE(i);
    CHECK(std::memcmp(&plain.losses[i], &checkpointed.losses[i], sizeof(double)) == 0);
  }
  CHECK(plain.losses.back() < plain.losses.front());
  REQUIRE(plain.state.keys() == checkpointed.state.keys());
  for (const auto& [name, tensor] : plain.state) {
    CAPTURE(name);
    CHECK(same_bits(tensor, checkpointed.state.at(name)));
  }
  // FULL_SHARD gathers each unit again for backward anyway: the recomputation uses that gather.
  CHECK(checkpointed.report.all_gathers == plain.report.all_gathers);
  CHECK(checkpointed.report.reduce_scatters == plain.report.reduce_scatters);
  CHECK(checkpointed.report.replica_all_reduced_bytes == plain.report.replica_all_reduced_bytes);
}

}  // namespace

TEST_CASE("checkpointed Blocks under FSDP: losses and parameters bit-identical to the run without, dropout on") {
  check_bit_identical({.wrap_policy = fsdp::WrapPolicy::module_type({"Block"})}, nullptr, "a unit per Block");
  check_bit_identical({.wrap_policy = fsdp::WrapPolicy::owns_parameters()}, nullptr,
                      "units nested inside the checkpointed Blocks");
  check_bit_identical({.wrap_policy = fsdp::WrapPolicy::module_type({"Block"}), .prefetch = false}, nullptr,
                      "without prefetch");
  check_bit_identical({.strategy = fsdp::ShardingStrategy::shard_grad_op,
                       .wrap_policy = fsdp::WrapPolicy::module_type({"Block"})},
                      nullptr, "SHARD_GRAD_OP");
  const auto& world = dist_test::world();
  if (world->size() == 4) {
    check_bit_identical({.wrap_policy = fsdp::WrapPolicy::module_type({"Block"})},
                        ts::dist::init_device_mesh(world, {2, 2}), "hybrid, 2 x 2");
  }
}

TEST_CASE("activation_checkpointing naming no module type of the model is refused") {
  TinyGPT model(kModel);
  const std::string message = dist_test::error_of(
      [&] { fsdp::fully_shard(model, dist_test::world(), {.activation_checkpointing = {"Blok"}}); });
  CHECK(test_support::contains(message, "activation_checkpointing names no module type of this model"));
}

TEST_CASE("checkpointed GPT2Blocks at least halve a GPT-2's activation memory (peak - state)") {
  // Issue #13's bar on a GPT-2 small enough for the suite: 6 layers of width 128, a
  // vocabulary of 512, 4 x 64 tokens, AdamW, under FSDP (a unit per block), model(ids,
  // targets) so that the logits do not live through backward. Activation memory is the
  // allocator's peak over the second step minus what stays after it (parameter shards,
  // their gradients and AdamW's state): deterministic bytes.
  namespace models = tessera::models;
  const auto& world = dist_test::world();
  const models::GPTConfig config{.n_layer = 6, .n_head = 4, .n_embd = 128, .block_size = 64, .vocab_size = 512};
  const int64_t global_rows = 4;
  const ts::data::RowRange rows = ts::data::DistributedSampler{world->rank(), world->size()}.rows_of(global_rows);
  ts::Generator gen(3);
  const Tensor tokens = ts::randint(0, config.vocab_size, {global_rows, 65}, gen);
  const Tensor ids = tokens.narrow(1, 0, 64).narrow(0, rows.begin, rows.size()).contiguous();
  const Tensor targets = tokens.narrow(1, 1, 64).narrow(0, rows.begin, rows.size()).contiguous();
  auto activation_bytes = [&](bool checkpointed) {
    models::GPT2 model(config);
    fsdp::FullyShardOptions options{.wrap_policy = fsdp::WrapPolicy::module_type({models::kBlockTypeName})};
    if (checkpointed) options.activation_checkpointing = {models::kBlockTypeName};
    fsdp::fully_shard(model, world, options);
    ts::optim::AdamW adamw(model.parameters(), {.lr = 1e-3});
    int64_t activations = 0;
    for (int step = 0; step < 2; ++step) {
      adamw.zero_grad();
      ts::reset_peak_memory();
      model.forward(ids, targets).backward();
      adamw.step();
      activations = ts::memory_stats().peak_bytes - ts::memory_stats().current_bytes;
    }
    return activations;
  };
  const int64_t without = activation_bytes(false), with = activation_bytes(true);
  MESSAGE("rank ", world->rank(), " of ", world->size(), ": activation memory ", without, " bytes without checkpointing, ",
          with, " with (", static_cast<double>(with) / static_cast<double>(without), ")");
  // Measured: 1 rank 10,371,076 -> 3,285,508 bytes (0.32); 2 ranks 7,743,492 -> 3,869,700
  // (0.50); 4 ranks 5,488,644 -> 3,551,748 (0.65). The bar is issue #13's at one rank; at
  // more ranks each rank's rows shrink while the root's gathered wte (and its unsharded
  // gradient) stay whole, so checkpointing saves less of the peak there.
  if (world->size() == 1) {
    CHECK(2 * with <= without);
  } else {
    CHECK(with < without);
  }
}
