// GPT-2 under FSDP, run under mpirun with 1 to 4 ranks (3 splits the 4-row batch 2, 1, 1 and
// pads every unit): one unit per GPT2Block, the embeddings and ln_f with the root, so the
// tied head (lm_head reads transformer.wte.weight) is in the root's unit with the table.
//
// - Against PyTorch: 10 AdamW steps with nanoGPT's groups (over the original parameters, each
//   stepping its segment of its unit's shard), schedule and clipping (fsdp::clip_grad_norm):
//   per-step losses within float64 1e-10 and float32 1e-5 of PyTorch's, and the gathered
//   parameters after them.
// - Dropout on: the sharded run against the same model trained unsharded on each rank
//   (masks are keyed by global row, so N ranks drop what one rank drops): float64 1e-10.
// - Checkpoints: a run resumed from a sharded checkpoint repeats the uninterrupted run's
//   losses bit for bit.
// - Generation: every rank generates PyTorch's greedy tokens from the sharded model.
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <optional>

#include "../dist/dist_test_support.h"
#include "gpt2_reference.h"
#include "temp_dir.h"

namespace ts = tessera;
namespace fsdp = tessera::fsdp;
namespace models = tessera::models;
using gpt2_reference::reference;
using gpt2_reference::tag;
using ts::DType;
using ts::Tensor;

namespace {

const fsdp::FullyShardOptions kSharding{.wrap_policy = fsdp::WrapPolicy::module_type({models::kBlockTypeName}),
                                        .gradient_reduction = ts::dist::ReduceOp::sum};

ts::data::RowRange my_rows() {
  const auto& world = dist_test::world();
  return ts::data::DistributedSampler{world->rank(), world->size()}.rows_of(reference().training.batch);
}

std::unique_ptr<models::GPT2> sharded_model(DType dtype, const models::GPTConfig& config) {
  auto model = std::make_unique<models::GPT2>(config);
  model->to(dtype);
  fsdp::fully_shard(*model, dist_test::world(), kSharding);
  model->load_hf_state_dict(gpt2_reference::hub_weights());  // every rank keeps its slices
  return model;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor ca = a.detach().contiguous(), cb = b.detach().contiguous();
  return ca.numel() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

double global_sum(double local) {
  Tensor value = ts::full({}, local, {.dtype = DType::f64});
  dist_test::world()->all_reduce(value);
  return value.item<double>();
}

// One training step of the sharded model on this rank's rows; returns the global loss.
double sharded_step(models::GPT2& model, gpt2_reference::NanoGptOptimizer& opt, int64_t step) {
  const ts::data::RowRange rows = my_rows();
  ts::nn::BatchScope scope({.seed = 5, .step = static_cast<uint64_t>(step), .first_row = rows.begin});
  opt.adamw->zero_grad();
  Tensor loss = gpt2_reference::rows_loss(model, step, rows.begin, rows.size());
  loss.backward();
  fsdp::clip_grad_norm(model, reference().training.grad_clip);
  opt.adamw->step();
  opt.schedule->step();
  return global_sum(loss.item<double>());
}

// A folder every rank sees under one name: rank 0's temporary folder (the job runs on one machine).
std::string shared_folder(const ts::testing::TempDir& own) {
  std::string name = own.path().string();
  Tensor bytes = ts::zeros({512}, {.dtype = DType::u8});
  if (dist_test::world()->rank() == 0) std::copy(name.begin(), name.end(), bytes.data_ptr<uint8_t>());
  dist_test::world()->broadcast(bytes, 0);
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()));
}

}  // namespace

TEST_CASE("GPT2 under FSDP: the tied head sits in the root's unit with wte") {
  auto model = sharded_model(DType::f32, reference().config);
  std::vector<std::string> names;
  for (const fsdp::UnitInfo& unit : fsdp::units(*model)) names.push_back(unit.name);
  CHECK(names == std::vector<std::string>{"transformer.h.0", "transformer.h.1", "(root)"});
  const fsdp::UnitInfo root = fsdp::units(*model).back();
  std::vector<std::string> root_parameters;
  for (const auto& entry : root.layout.entries()) root_parameters.push_back(entry.name);
  CHECK(root_parameters == std::vector<std::string>{"transformer.wte.weight", "transformer.wpe.weight",
                                                    "transformer.ln_f.weight", "transformer.ln_f.bias"});
}

TEST_CASE("GPT2 under FSDP: 10 AdamW steps match PyTorch's at every world size") {
  const auto& ref = reference();
  for (DType dtype : {DType::f32, DType::f64}) {
    CAPTURE(tag(dtype));
    auto model = sharded_model(dtype, ref.config);
    gpt2_reference::NanoGptOptimizer opt(fsdp::named_original_parameters(*model), ref.training);
    const std::vector<double> losses = ref.at(tag(dtype) + "/loss").to_vector<double>();
    for (int64_t step = 0; step < ref.training.steps; ++step) {
      CAPTURE(step);
      const double loss = sharded_step(*model, opt, step);
      CHECK(gpt2_reference::relative_error(loss, losses[step]) <= gpt2_reference::loss_tolerance(dtype));
    }
    // The parameters gathered, as the unit test compares them (c_attn's key bias aside: its
    // gradient is rounding noise, see test_gpt2.cpp).
    ts::StateDict full = model->state_dict();
    const int64_t c = ref.config.n_embd;
    for (const auto& [name, tensor] : full) {
      CAPTURE(name);
      Tensor actual = tensor, expected = ref.at(tag(dtype) + "/final." + name);
      if (name.ends_with("attn.c_attn.bias")) actual = actual.narrow(0, 0, c), expected = expected.narrow(0, 0, c);
      CHECK(test_support::relative_difference(actual, expected) <= gpt2_reference::loss_tolerance(dtype));
    }
  }
}

TEST_CASE("GPT2 under FSDP: with dropout, N ranks learn what one rank learns") {
  models::GPTConfig config = reference().config;
  config.dropout = 0.2;
  auto sharded = sharded_model(DType::f64, config);
  auto single = std::make_unique<models::GPT2>(config);  // every rank trains the whole batch unsharded
  single->to(DType::f64);
  single->load_hf_state_dict(gpt2_reference::hub_weights());
  gpt2_reference::NanoGptOptimizer sharded_opt(fsdp::named_original_parameters(*sharded), reference().training);
  gpt2_reference::NanoGptOptimizer single_opt(single->named_parameters(), reference().training);
  const std::vector<double> without_dropout = reference().at("f64/loss").to_vector<double>();
  for (int64_t step = 0; step < 4; ++step) {
    CAPTURE(step);
    const double sharded_loss = sharded_step(*sharded, sharded_opt, step);
    ts::nn::BatchScope scope({.seed = 5, .step = static_cast<uint64_t>(step), .first_row = 0});
    single_opt.adamw->zero_grad();
    Tensor loss = gpt2_reference::rows_loss(*single, step, 0, reference().training.batch);
    loss.backward();
    ts::nn::clip_grad_norm(single->parameters(), reference().training.grad_clip);
    single_opt.adamw->step();
    single_opt.schedule->step();
    CHECK(gpt2_reference::relative_error(sharded_loss, loss.item<double>()) <= 1e-10);
    CHECK(std::abs(sharded_loss - without_dropout[static_cast<size_t>(step)]) > 1e-3);  // dropout ran
  }
  ts::StateDict single_state = single->state_dict();
  for (const auto& [name, tensor] : sharded->state_dict()) {
    if (name.ends_with("attn.c_attn.bias")) continue;  // its key third is rounding noise (test_gpt2.cpp)
    CAPTURE(name);
    CHECK(test_support::relative_difference(tensor, single_state.at(name)) <= 1e-10);
  }
}

TEST_CASE("GPT2 under FSDP at one rank: every gradient, the tied wte's too, is the unsharded model's bit for bit") {
  // The root's gradient buffer takes wte's two gradients (the head's, then the embedding's)
  // as each arrives (the autograd gradient sink): 0 + head + embedding, the bits of the
  // engine's head + embedding added at once. Two backwards, the first under no_sync (the
  // second finds the buffer kept and takes the usual path).
  if (dist_test::world()->size() != 1) return;
  const auto& ref = reference();
  for (DType dtype : {DType::f32, DType::f64}) {
    CAPTURE(tag(dtype));
    auto sharded = sharded_model(dtype, ref.config);
    models::GPT2 single(ref.config);
    single.to(dtype);
    single.load_hf_state_dict(gpt2_reference::hub_weights());
    for (int64_t step = 0; step < 2; ++step) {
      {
        std::optional<fsdp::NoSyncScope> no_sync;
        if (step == 0) no_sync.emplace(*sharded);
        gpt2_reference::rows_loss(*sharded, step, 0, ref.training.batch).backward();
      }
      gpt2_reference::rows_loss(single, step, 0, ref.training.batch).backward();
    }
    std::map<std::string, Tensor> single_parameters;
    for (const auto& [name, parameter] : single.named_parameters()) single_parameters[name] = parameter;
    for (const fsdp::UnitInfo& unit : fsdp::units(*sharded)) {
      REQUIRE(unit.shard.grad().defined());
      for (const auto& entry : unit.layout.entries()) {
        CAPTURE(entry.name);
        const Tensor grad = unit.shard.grad().narrow(0, entry.offset, entry.numel).view(entry.shape);
        CHECK(same_bits(grad, single_parameters.at(entry.name).grad()));
      }
    }
  }
}

TEST_CASE("GPT2 under FSDP: a resumed run repeats the uninterrupted losses bit for bit") {
  const auto& ref = reference();
  ts::testing::TempDir own;
  const std::string root = shared_folder(own) + "/ckpt";
  std::vector<double> uninterrupted;
  {
    auto model = sharded_model(DType::f32, ref.config);
    gpt2_reference::NanoGptOptimizer opt(fsdp::named_original_parameters(*model), ref.training);
    ts::checkpoint::CheckpointManager checkpoints(root);
    for (int64_t step = 0; step < 6; ++step) {
      uninterrupted.push_back(sharded_step(*model, opt, step));
      if (step == 2) {
        checkpoints.save(*model, {.optimizer = opt.adamw.get(), .scheduler = opt.schedule.get()},
                         {.step = 3, .seed = 5});
      }
    }
  }
  auto model = sharded_model(DType::f32, ref.config);
  gpt2_reference::NanoGptOptimizer opt(fsdp::named_original_parameters(*model), ref.training);
  ts::checkpoint::CheckpointManager checkpoints(root);
  auto restored = checkpoints.restore(*model, {.optimizer = opt.adamw.get(), .scheduler = opt.schedule.get()});
  CHECK(restored.has_value());
  CHECK(restored->step == 3);
  CHECK(opt.adamw->lr(0) == ref.at("f32/lr").to_vector<double>()[3]);
  for (int64_t step = 3; step < 6; ++step) {
    CAPTURE(step);
    CHECK(sharded_step(*model, opt, step) == uninterrupted[static_cast<size_t>(step)]);
  }
}

TEST_CASE("GPT2 under FSDP: every rank generates PyTorch's greedy tokens") {
  const auto& ref = reference();
  auto model = sharded_model(DType::f64, ref.config);
  Tensor prompt = ref.at("tokens").select(0, 0).narrow(1, 0, ref.prompt_length);
  CHECK(model->generate(prompt, ref.new_tokens, {.temperature = 0}).to_vector<int64_t>() ==
        ref.at("f64/greedy").to_vector<int64_t>());
}

TEST_CASE("GPT2 under FSDP: a unit of its own for wte is refused with the way out, at one rank too") {
  auto model = std::make_unique<models::GPT2>(reference().config);
  fsdp::fully_shard(*model, dist_test::world());  // every module owning parameters a unit, wte too
  // At every world size: one rank's wte is released after its unit's forward, as at N.
  const std::string message = dist_test::error_of([&] { gpt2_reference::rows_loss(*model, 0, 0, 1); });
  CHECK(test_support::contains(message, "lm_head: its weight is transformer.wte.weight, whose memory FSDP released"));
  CHECK(test_support::contains(message, "WrapPolicy::module_type({\"GPT2Block\"})"));
}
