// Run under mpirun by test_reshard.cpp, with the dist tests' main (failures agreed across
// ranks). The MNIST network (dropout on) trains on small synthetic data with Adam and StepLR
// (the learning rate decays every epoch), with the DataLoader's shuffle and DistributedSampler.
//
//   "save" test case (4 ranks): train 7 steps (into the second epoch), save a sharded
//     checkpoint and a full reference, then train 12 more steps and record their losses (the
//     uninterrupted run). Resume from the checkpoint at 4 ranks: the 12 losses again, bit for
//     bit. Also: a save that fails on one rank fails on all; a load that fails on one rank
//     (its file is corrupt) fails on all and changes nothing.
//   "hsdp-save" (4 ranks as 2 replicas x 2): the same training hybrid-sharded; the first
//     replica writes a sharded checkpoint (world size 2 in its metadata), a full reference
//     and, through a CheckpointManager, a managed one, and an asynchronous one while training
//     goes on (the same files); resumed 2 x 2, 12 losses bit for bit.
//   "async-failure" (2 ranks): an asynchronous save whose write fails on rank 1 only (its
//     file size limit) is reported by the next poll() on both ranks, naming rank 1, and
//     `latest` stays on the checkpoint before.
//   "hsdp-load" (1, 3 or 4 ranks, plain FSDP): the 2 x 2 checkpoint loads bit for bit
//     against its reference and resumes to the hybrid run's losses (1e-5).
//   "load" test case (1, 2, 3 or 4 ranks): load the 4-rank checkpoint into NaN-filled
//     targets; every shard and optimizer state tensor equals the reference's slice bit for
//     bit (padding zero), and the gathered full checkpoint equals the reference file. Resume:
//     12 steps whose losses match the 4-rank run to 1e-5; a checkpoint saved 2 steps in at
//     this world size, resumed, gives the next 10 losses bit for bit.
// CHECKPOINT_TEST_DIR names the folder shared by the runs.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <sys/resource.h>

#include "../../examples/mnist_net.h"
#include "../dist/dist_test_support.h"
#include "temp_dir.h"

namespace ts = tessera;
namespace ckpt = tessera::checkpoint;
using ts::Tensor;

namespace {

constexpr uint64_t kSeed = 5;
constexpr int64_t kSamples = 40, kBatch = 8;  // 5 batches per epoch; 8 rows split 8, 4+4, 3+3+2, 2+2+2+2
constexpr int kSavedAt = 7;                   // epoch 1, batch 2
constexpr int kAfter = 12;

std::string test_dir() {
  const char* dir = std::getenv("CHECKPOINT_TEST_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "CHECKPOINT_TEST_DIR is not set (test_reshard sets it)");
  return dir;
}

// Random images and labels, fixed by the seed.
class Synthetic : public ts::data::Dataset {
 public:
  Synthetic() {
    ts::Generator gen(kSeed);
    images_ = ts::randn({kSamples, 1, 28, 28}, gen);
    labels_ = ts::randint(0, 10, {kSamples}, gen);
  }
  int64_t size() const override { return kSamples; }
  ts::data::Batch get_batch(const std::vector<int64_t>& indices) const override {
    ts::data::Batch batch;
    const auto rows = static_cast<int64_t>(indices.size());
    batch.data = ts::empty({rows, 1, 28, 28});
    batch.target = ts::empty({rows}, {.dtype = ts::DType::i64});
    for (int64_t r = 0; r < rows; ++r) {
      batch.data.narrow(0, r, 1).copy_(images_.narrow(0, indices[static_cast<size_t>(r)], 1));
      batch.target.narrow(0, r, 1).copy_(labels_.narrow(0, indices[static_cast<size_t>(r)], 1));
    }
    return batch;
  }

 private:
  Tensor images_, labels_;
};

// A training run: model, optimizer, scheduler, loader and where it stands.
struct Run {
  mnist::Net model;
  std::unique_ptr<ts::optim::Adam> adam;
  std::unique_ptr<ts::optim::StepLR> scheduler;
  Synthetic data;
  std::unique_ptr<ts::data::DataLoader> loader;
  ckpt::TrainingState state{.seed = kSeed};

  // With `mesh` ({replicas, shard group size}), hybrid-sharded over the world.
  explicit Run(ts::fsdp::ShardingStrategy strategy = ts::fsdp::ShardingStrategy::full_shard,
               std::optional<std::array<int, 2>> mesh = std::nullopt) {
    const auto& world = dist_test::world();
    model.reset_parameters(kSeed);
    const ts::fsdp::FullyShardOptions options{.strategy = strategy, .gradient_reduction = ts::dist::ReduceOp::sum};
    if (mesh) {
      ts::fsdp::fully_shard(model, ts::dist::init_device_mesh(world, *mesh), options);
    } else {
      ts::fsdp::fully_shard(model, world, options);
    }
    adam = std::make_unique<ts::optim::Adam>(model.parameters(), ts::optim::AdamOptions{.lr = 2e-3});
    scheduler = std::make_unique<ts::optim::StepLR>(*adam, 1, 0.7);
    loader = std::make_unique<ts::data::DataLoader>(
        data, ts::data::DataLoaderOptions{.batch_size = kBatch, .shuffle = true, .seed = kSeed,
                                          .sampler = {.rank = world->rank(), .world_size = world->size()}});
  }
  ckpt::Stateful with() { return {.optimizer = adam.get(), .scheduler = scheduler.get()}; }

  // Trains `steps` steps from `state`; returns each step's global loss.
  std::vector<double> train(int steps) {
    std::vector<double> losses;
    model.train();
    while (static_cast<int>(losses.size()) < steps) {
      for (const ts::data::Batch& batch : loader->epoch(state.epoch, state.batch)) {
        ts::nn::BatchScope scope({.seed = state.seed, .step = state.step, .first_row = batch.first_row});
        adam->zero_grad();
        Tensor loss = ts::nll_loss(model(batch.data), batch.target, {.reduction = ts::Reduction::sum}) /
                      static_cast<double>(batch.global_rows);
        loss.backward();
        adam->step();
        Tensor global = loss.detach().to(ts::DType::f64);
        dist_test::world()->all_reduce(global);
        losses.push_back(global.item<double>());
        ++state.step;
        ++state.batch;
        if (static_cast<int>(losses.size()) == steps) break;
      }
      if (state.batch == loader->size()) {  // the epoch is done
        scheduler->step();
        ++state.epoch;
        state.batch = 0;
      }
    }
    return losses;
  }
};

void poison(Run& run) {
  // One step so that Adam's state exists, then NaN everywhere a load must write.
  run.train(1);
  ts::NoGradGuard no_grad;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (auto& unit : ts::fsdp::units(run.model)) unit.shard.detach().fill_(nan);
  for (size_t i = 0; i < run.adam->params().size(); ++i) {
    for (const auto& [name, value] : run.adam->state(i)) {
      Tensor handle = value;
      handle.fill_(nan);
    }
  }
  run.state = {};
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor ca = a.detach().contiguous(), cb = b.detach().contiguous();
  return a.numel() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

void write_losses(const std::string& path, const std::vector<double>& losses) {
  ts::io::json::Array values;
  for (double loss : losses) values.emplace_back(loss);
  std::ofstream(path) << ts::io::json::write(ts::io::json::Value(std::move(values)));
}

std::vector<double> read_losses(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<double> losses;
  ts::io::json::Value parsed = ts::io::json::parse(text);
  for (const auto& value : parsed.as_array()) losses.push_back(value.as_double());
  return losses;
}

// Every shard and optimizer state tensor of `run` equals the reference's slice for this
// rank (its padding zero), bit for bit; scalars, hyper-parameters and scheduler equal too.
void check_against_reference(Run& run, const ckpt::FullCheckpoint& reference) {
  const ckpt::Manifest& manifest = reference.manifest();
  std::vector<ts::fsdp::UnitInfo> units = ts::fsdp::units(run.model);
  int mismatches = 0, compared = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    const ts::fsdp::UnitInfo& info = units[u];
    REQUIRE(manifest.units[u].name == info.name);
    size_t index = 0;
    while (!run.adam->params()[index].is_same(info.shard)) ++index;
    std::vector<std::pair<std::string, Tensor>> targets{{"", info.shard}};
    for (const std::string& state : manifest.units[u].state_tensors) targets.emplace_back(state, run.adam->state(index).at(state));
    for (const auto& [state, actual] : targets) {
      Tensor expected = ts::zeros({info.shard.numel()});
      const int64_t flat = info.layout.flat_numel();
      const int64_t begin = std::min(info.range.begin, flat), end = std::min(info.range.end, flat);
      if (end > begin) reference.read(u, state, begin, expected.narrow(0, 0, end - begin));
      ++compared;
      if (!same_bits(actual, expected)) ++mismatches;
    }
    const ckpt::OptimizerStateRecord* record = manifest.find_optimizer_state(manifest.units[u].flat_parameter);
    CHECK(record != nullptr);
    if (record == nullptr) continue;
    for (const auto& [name, scalar] : record->scalars) {
      CHECK(run.adam->state(index).at(name).item<double>() == scalar.item<double>());
    }
  }
  CHECK(mismatches == 0);
  CHECK(compared == 3 * 4);  // 4 units: parameters, exp_avg, exp_avg_sq
  CHECK(run.adam->lr() == manifest.optimizer_groups.at(0).hyperparameters.at("lr").item<double>());
  CHECK(run.scheduler->last_epoch() == manifest.scheduler_state.at("last_epoch").item<int64_t>());
}

}  // namespace

TEST_CASE("save: 4 ranks save mid-epoch, record the uninterrupted run, resume it bit for bit") {
  const auto& world = dist_test::world();
  REQUIRE(world->size() == 4);
  const std::string dir = test_dir();
  Run run;
  run.train(kSavedAt);
  CHECK(run.state.epoch == 1);
  CHECK(run.state.batch == 2);
  ckpt::save_sharded(dir + "/saved-at-4", run.model, run.with(), run.state);
  ckpt::save_full(dir + "/reference.safetensors", run.model, run.with(), run.state);
  std::vector<double> uninterrupted = run.train(kAfter);
  if (world->rank() == 0) write_losses(dir + "/losses-4.json", uninterrupted);

  Run resumed;
  poison(resumed);
  resumed.state = ckpt::load_sharded(dir + "/saved-at-4", resumed.model, resumed.with());
  CHECK(resumed.state.step == static_cast<uint64_t>(kSavedAt));
  std::vector<double> again = resumed.train(kAfter);
  CHECK(again == uninterrupted);  // bit for bit

  // A save that fails on one rank (rank 2 has a NaN to record) fails on every rank.
  ckpt::TrainingState bad = run.state;
  if (world->rank() == 2) bad.extra.set("loss", std::nan(""));
  std::string error = dist_test::error_of([&] { ckpt::save_sharded(dir + "/failed", run.model, run.with(), bad); });
  CHECK(!error.empty());
  if (world->rank() != 2) CHECK(error.find("failed on rank(s) 2 of 4") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir + "/failed"));

  // A load that fails on one rank (only rank 3 reads the corrupt file) fails on every rank
  // and changes nothing anywhere.
  if (world->rank() == 0) {
    std::filesystem::copy(dir + "/saved-at-4", dir + "/corrupt", std::filesystem::copy_options::recursive);
    std::string file = dir + "/corrupt/" + ckpt::rank_file_name(3, 4);
    std::fstream out(file, std::ios::in | std::ios::out | std::ios::binary);
    out.seekp(-5, std::ios::end);
    out.put('\x7f');
  }
  world->barrier();
  ts::StateDict before = resumed.model.state_dict();
  error = dist_test::error_of([&] { ckpt::load_sharded(dir + "/corrupt", resumed.model, resumed.with()); });
  CHECK(error.find("rank-00003-of-00004.safetensors: byte ") != std::string::npos);
  CHECK(error.find("CRC32C mismatch") != std::string::npos);
  if (world->rank() != 3) CHECK(error.find("failed on rank(s) 3 of 4") != std::string::npos);
  ts::StateDict after = resumed.model.state_dict();
  for (const auto& [name, tensor] : before) CHECK(same_bits(after.at(name), tensor));
}

TEST_CASE("load: the 4-rank checkpoint loads exactly at this world size and resumes") {
  const auto& world = dist_test::world();
  const std::string dir = test_dir();
  const std::string mine = dir + "/at-" + std::to_string(world->size());
  Run run;
  poison(run);
  run.state = ckpt::load_sharded(dir + "/saved-at-4", run.model, run.with());
  CHECK(run.state.step == static_cast<uint64_t>(kSavedAt));
  CHECK(run.state.epoch == 1);
  CHECK(run.state.batch == 2);
  CHECK(run.state.seed == kSeed);
  ckpt::FullCheckpoint reference(dir + "/reference.safetensors");
  check_against_reference(run, reference);

  // Gathered, it is the reference file, tensor for tensor.
  ckpt::save_full(mine + "-gathered.safetensors", run.model, run.with(), run.state);
  if (world->rank() == 0) {
    ts::StateDict expected = ts::io::load(dir + "/reference.safetensors");
    ts::StateDict gathered = ts::io::load(mine + "-gathered.safetensors");
    CHECK(gathered.keys() == expected.keys());
    int mismatches = 0;
    for (const auto& [name, tensor] : expected) mismatches += same_bits(gathered.at(name), tensor) ? 0 : 1;
    CHECK(mismatches == 0);
  }

  // Resume at this world size against the 4-rank run; save 2 steps in for the next check.
  std::vector<double> reference_losses = read_losses(dir + "/losses-4.json");
  std::vector<double> losses = run.train(2);
  ckpt::CheckpointManager manager(mine);
  manager.save(run.model, run.with(), run.state);
  std::vector<double> rest = run.train(kAfter - 2);
  losses.insert(losses.end(), rest.begin(), rest.end());
  double worst = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    worst = std::max(worst, std::abs(losses[i] - reference_losses[i]) / std::abs(reference_losses[i]));
  }
  if (world->rank() == 0) {
    MESSAGE(world->size(), " rank(s): resumed losses vs the 4-rank run, worst relative difference ", worst,
            std::string(world->size() == 4 ? " (same world size: must be 0)" : ""));
  }
  CHECK(worst <= 1e-5);  // the ranks sum gradients in another order: equal up to rounding
  if (world->size() == 4) CHECK(worst == 0.0);

  // Stop after the step saved above and resume at this world size: the next 10 losses bit for bit.
  Run resumed;
  poison(resumed);
  resumed.state = *manager.restore(resumed.model, resumed.with());
  CHECK(resumed.state.step == static_cast<uint64_t>(kSavedAt + 2));
  CHECK(resumed.train(kAfter - 2) == rest);

  // Into a NO_SHARD model (data parallel): the same full state.
  Run replicated(ts::fsdp::ShardingStrategy::no_shard);
  ckpt::load_sharded(dir + "/saved-at-4", replicated.model, replicated.with());
  ckpt::save_full(mine + "-no-shard.safetensors", replicated.model, replicated.with(), run.state);
  if (world->rank() == 0) {
    ts::StateDict expected = ts::io::load(dir + "/reference.safetensors");
    ts::StateDict gathered = ts::io::load(mine + "-no-shard.safetensors");
    int mismatches = 0;
    for (const auto& [name, tensor] : expected) mismatches += same_bits(gathered.at(name), tensor) ? 0 : 1;
    CHECK(mismatches == 0);
  }
}

TEST_CASE("hsdp-save: a 2 x 2 job's first replica writes the checkpoint; resumed 2 x 2 it repeats its losses") {
  const auto& world = dist_test::world();
  REQUIRE(world->size() == 4);
  const std::string dir = test_dir();
  const std::array<int, 2> mesh{2, 2};
  Run run(ts::fsdp::ShardingStrategy::full_shard, mesh);
  run.train(kSavedAt);
  ckpt::save_sharded(dir + "/hsdp-2x2", run.model, run.with(), run.state);
  ckpt::save_full(dir + "/hsdp-reference.safetensors", run.model, run.with(), run.state);
  ckpt::CheckpointManager managed(dir + "/hsdp-managed", {.keep_last = 1});
  managed.save(run.model, run.with(), run.state);
  ckpt::CheckpointManager async(dir + "/hsdp-async", {.keep_last = 1, .async_save = true});
  async.save(run.model, run.with(), run.state);
  std::vector<double> uninterrupted = run.train(kAfter);  // while the asynchronous save writes
  async.wait();
  if (world->rank() == 0) write_losses(dir + "/hsdp-losses.json", uninterrupted);
  const std::string async_step = dir + "/hsdp-async/" + ckpt::CheckpointManager::directory_name(kSavedAt);
  const std::string sync_step = dir + "/hsdp-managed/" + ckpt::CheckpointManager::directory_name(kSavedAt);
  CHECK(async.latest() == async_step);
  for (const char* name : {"/metadata.json", "/rank-00000-of-00002.safetensors", "/rank-00001-of-00002.safetensors"}) {
    CAPTURE(name);
    CHECK(ts::testing::read_file_bytes(async_step + name) == ts::testing::read_file_bytes(sync_step + name));
  }

  ckpt::ShardedCheckpoint saved(dir + "/hsdp-2x2");
  CHECK(saved.metadata().world_size == 2);  // the shard group's size: one file per shard
  CHECK(managed.latest() == dir + "/hsdp-managed/" + ckpt::CheckpointManager::directory_name(kSavedAt));

  Run resumed(ts::fsdp::ShardingStrategy::full_shard, mesh);
  poison(resumed);
  resumed.state = *managed.restore(resumed.model, resumed.with());
  CHECK(resumed.state.step == static_cast<uint64_t>(kSavedAt));
  CHECK(resumed.train(kAfter) == uninterrupted);  // bit for bit
}

TEST_CASE("hsdp-load: the 2 x 2 checkpoint loads exactly into plain FSDP at this world size and resumes") {
  const auto& world = dist_test::world();
  const std::string dir = test_dir();
  Run run;
  poison(run);
  run.state = ckpt::load_sharded(dir + "/hsdp-2x2", run.model, run.with());
  CHECK(run.state.step == static_cast<uint64_t>(kSavedAt));
  check_against_reference(run, ckpt::FullCheckpoint(dir + "/hsdp-reference.safetensors"));
  std::vector<double> reference_losses = read_losses(dir + "/hsdp-losses.json");
  std::vector<double> losses = run.train(kAfter);
  double worst = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    worst = std::max(worst, std::abs(losses[i] - reference_losses[i]) / std::abs(reference_losses[i]));
  }
  if (world->rank() == 0) {
    MESSAGE(world->size(), " rank(s): resumed from the 2 x 2 checkpoint, losses vs the hybrid run, worst relative "
            "difference ", worst);
  }
  CHECK(worst <= 1e-5);  // float32; the ranks sum gradients in another order
}

TEST_CASE("async-failure: a write that fails on one rank is reported on both by the next poll; latest stays") {
  const auto& world = dist_test::world();
  REQUIRE(world->size() == 2);
  const std::string root = test_dir() + "/async-failure";
  Run run;
  run.train(2);
  ckpt::CheckpointManager manager(root, {.async_save = true});
  manager.save(run.model, run.with(), run.state);
  manager.wait();
  const std::string before = *manager.latest();
  struct rlimit unlimited {};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &unlimited) == 0);
  if (world->rank() == 1) {
    struct rlimit small = unlimited;
    small.rlim_cur = 1024;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  }
  run.train(1);
  manager.save(run.model, run.with(), run.state);  // returns: the write runs in the background
  std::string reported;
  for (int step = 0; step < 10000 && reported.empty(); ++step) {  // each rank polls after each of its steps
    reported = dist_test::error_of([&] { manager.poll(); });
  }
  if (world->rank() == 1) REQUIRE(::setrlimit(RLIMIT_FSIZE, &unlimited) == 0);
  CHECK(reported.find("the asynchronous save of checkpoint '" + root + "/" +
                      ckpt::CheckpointManager::directory_name(run.state.step) + "' failed") != std::string::npos);
  CHECK(reported.find("File too large") != std::string::npos);
  if (world->rank() == 0) CHECK(reported.find("failed on rank(s) 1 of 2") != std::string::npos);
  CHECK(manager.latest() == before);
  CHECK(dist_test::error_of([&] { manager.wait(); }).empty());  // reported once
}
