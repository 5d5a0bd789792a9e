// Checkpoints at one rank: save and load restore model, buffers, optimizer (hyper-
// parameters and state) and scheduler bit for bit into NaN-filled targets; the offline
// conversions reshard to 1..5 ranks and to and from full files exactly; full files carry
// PyTorch's names; the manager keeps, prunes and points `latest`; mismatches are refused
// without changing anything. (Loading saved shards at other world sizes under mpirun:
// tests/checkpoint/test_reshard.cpp.)
#include "checkpoint_test_support.h"

#include <filesystem>

#include "tessera/checkpoint/manifest_reader.h"

using namespace checkpoint_test;
using ts::testing::TempDir;

namespace {

std::shared_ptr<ts::dist::ProcessGroup> one_rank() { return std::make_shared<ts::dist::SingleProcessGroup>(); }

ckpt::TrainingState sample_state() {
  ckpt::TrainingState state{.step = 6, .epoch = 3, .batch = 2, .seed = 18'000'000'000'000'000'000ull};
  ts::Generator gen(11, 2);
  gen.advance(1234);
  state.generators["augment"] = ckpt::GeneratorState::of(gen);
  state.extra.set("loss_sum", 0.125);
  state.extra.set("note", "x");
  return state;
}

void check_state(const ckpt::TrainingState& got, const ckpt::TrainingState& want) {
  CHECK(got.step == want.step);
  CHECK(got.epoch == want.epoch);
  CHECK(got.batch == want.batch);
  CHECK(got.seed == want.seed);
  CHECK(got.generators == want.generators);
  CHECK(got.extra == want.extra);
}

// Every flat tensor and buffer of two sources, bit for bit.
void check_same_content(const ckpt::FlatSource& a, const ckpt::FlatSource& b) {
  REQUIRE(a.manifest().units.size() == b.manifest().units.size());
  CHECK(ts::io::json::write(ckpt::to_json(a.manifest())) == ts::io::json::write(ckpt::to_json(b.manifest())));
  for (size_t u = 0; u < a.manifest().units.size(); ++u) {
    const ckpt::UnitRecord& unit = a.manifest().units[u];
    std::vector<std::string> states{""};
    states.insert(states.end(), unit.state_tensors.begin(), unit.state_tensors.end());
    for (const std::string& state : states) {
      CAPTURE(unit.name);
      CAPTURE(state);
      CHECK(same_bits(a.slice(u, state, 0, unit.flat_numel), b.slice(u, state, 0, unit.flat_numel)));
      // Any sub-range too: a rank at another world size reads one.
      if (unit.flat_numel > 3) CHECK(same_bits(a.slice(u, state, 1, unit.flat_numel - 3), b.slice(u, state, 1, unit.flat_numel - 3)));
    }
  }
  for (const ckpt::BufferRecord& buffer : a.manifest().buffers) CHECK(same_bits(a.buffer(buffer.name), b.buffer(buffer.name)));
}

}  // namespace

TEST_CASE("a sharded checkpoint restores model, buffers, optimizer and scheduler bit for bit") {
  TempDir dir;
  Trained saved(one_rank(), 5);
  ckpt::TrainingState state = sample_state();
  const std::string path = dir.file("step");
  ckpt::save_sharded(path, saved.model, saved.with(), state);
  CHECK(entries_of(path) == std::vector<std::string>{"metadata.json", "rank-00000-of-00001.safetensors"});
  CHECK(dir.entries() == std::vector<std::string>{"step"});  // no temporary left

  Trained loaded(one_rank(), 1, /*seed=*/99);  // other values, and Adam state to overwrite
  poison(loaded);
  ckpt::TrainingState got = ckpt::load_sharded(path, loaded.model, loaded.with());
  check_state(got, state);
  check_same(loaded.model.state_dict(), saved.model.state_dict());
  check_same(loaded.adam->state_dict(), saved.adam->state_dict());
  check_same(loaded.scheduler->state_dict(), saved.scheduler->state_dict());
  CHECK(loaded.adam->lr() == saved.adam->lr());
  CHECK(loaded.model.counts.to_vector<int64_t>() == std::vector<int64_t>(4, 5));

  // The generator comes back where it was.
  ts::Generator restored = got.generators.at("augment").restore();
  CHECK(restored.seed() == 11);
  CHECK(restored.stream() == 2);
  CHECK(restored.offset() == 1234);

  // Model only: the optimizer and scheduler state in the checkpoint are ignored.
  SmallNet bare;
  ts::fsdp::fully_shard(bare, one_rank());
  ckpt::load_sharded(path, bare, {});
  check_same(bare.state_dict(), saved.model.state_dict());
}

TEST_CASE("the manifest records units, layouts, optimizer and training position") {
  Trained trained(one_rank(), 3);
  ckpt::Manifest manifest = ckpt::describe(trained.model, trained.with(), sample_state());
  REQUIRE(manifest.units.size() == 3);
  CHECK(manifest.units[0].name == "fc1");
  CHECK(manifest.units[0].flat_parameter == "fc1._flat_param");
  CHECK(manifest.units[2].name == "(root)");
  CHECK(manifest.units[2].flat_parameter == "_flat_param");
  // fc1: weight 35 elements at 0, bias 5 at 36 (16-byte alignment: a multiple of 4 floats).
  REQUIRE(manifest.units[0].parameters.size() == 2);
  CHECK(manifest.units[0].parameters[1].name == "fc1.bias");
  CHECK(manifest.units[0].parameters[1].offset == 36);
  CHECK(manifest.units[0].flat_numel == 41);
  CHECK(manifest.units[0].state_tensors == std::vector<std::string>{"exp_avg", "exp_avg_sq"});
  REQUIRE(manifest.find_optimizer_state("fc1._flat_param") != nullptr);
  CHECK(manifest.find_optimizer_state("fc1._flat_param")->scalars.at("step").item<double>() == 3.0);
  CHECK(manifest.optimizer == "Adam");
  REQUIRE(manifest.optimizer_groups.size() == 1);
  CHECK(manifest.optimizer_groups[0].params ==
        std::vector<std::string>{"_flat_param", "fc1._flat_param", "fc2._flat_param"});  // model.parameters() order
  CHECK(manifest.optimizer_groups[0].hyperparameters.at("lr").item<double>() == 0.005);  // one StepLR decay
  CHECK(manifest.scheduler == "StepLR");
  REQUIRE(manifest.buffers.size() == 1);
  CHECK(manifest.buffers[0].name == "counts");
  CHECK(manifest.parameter_numel() == 35 + 5 + 15 + 3 + 3);

  // JSON and back is the identity.
  ts::io::json::Value json = ckpt::to_json(manifest);
  ckpt::Manifest back = ckpt::manifest_from_json(ts::io::json::parse(ts::io::json::write(json)),
                                                 ckpt::detail::JsonReader("test"));
  CHECK(ts::io::json::write(ckpt::to_json(back)) == ts::io::json::write(json));
}

TEST_CASE("offline resharding to 1..5 ranks and to and from full files is exact") {
  TempDir dir;
  Trained trained(one_rank(), 4);
  ckpt::save_sharded(dir.file("one"), trained.model, trained.with(), sample_state());
  ckpt::ShardedCheckpoint original(dir.file("one"));

  for (int world = 1; world <= 5; ++world) {
    CAPTURE(world);
    const std::string path = dir.file(std::to_string(world) + "-ranks");
    ckpt::write_sharded(original, path, world);
    ckpt::ShardedCheckpoint resharded(path);
    CHECK(resharded.metadata().world_size == world);
    REQUIRE(resharded.metadata().files.size() == static_cast<size_t>(world));
    for (int rank = 0; rank < world; ++rank) {
      const ckpt::FileRecord& file = resharded.metadata().files[static_cast<size_t>(rank)];
      CHECK(file.name == ckpt::rank_file_name(rank, world));
      // fc1 has 41 elements: rank r holds [r*S, min((r+1)*S, 41)), S = ceil(41 / world).
      const int64_t per_rank = (41 + world - 1) / world;
      CHECK(file.slices[0].tensor == "fc1._flat_param");
      CHECK(file.slices[0].begin == std::min<int64_t>(41, rank * per_rank));
      CHECK(file.slices[0].end == std::min<int64_t>(41, (rank + 1) * per_rank));
    }
    check_same_content(resharded, original);
    resharded.verify_all();
  }

  const std::string full = dir.file("full.safetensors");
  ckpt::write_full(original, full);
  ckpt::FullCheckpoint full_checkpoint(full);
  check_same_content(full_checkpoint, original);
  ckpt::write_sharded(full_checkpoint, dir.file("from-full"), 3);
  ckpt::ShardedCheckpoint from_full(dir.file("from-full"));
  check_same_content(from_full, original);
  // Full -> sharded -> full gives the same tensors.
  ckpt::write_full(from_full, dir.file("again.safetensors"));
  check_same(ts::io::load(dir.file("again.safetensors")), ts::io::load(full));
}

TEST_CASE("a full checkpoint holds PyTorch's names and loads back exactly") {
  TempDir dir;
  Trained saved(one_rank(), 3);
  const std::string path = dir.file("model.safetensors");
  ckpt::save_full(path, saved.model, saved.with(), sample_state());

  ts::StateDict file = ts::io::load(path);
  ts::StateDict model = saved.model.state_dict();
  for (const auto& [name, tensor] : model) {
    CAPTURE(name);
    REQUIRE(file.contains(name));
    CHECK(same_bits(file.at(name), tensor));
  }
  // Adam's state per original parameter, in its shape: the flat state's slice.
  ts::Tensor exp_avg = file.at("optimizer.state.fc1.weight.exp_avg");
  CHECK(exp_avg.sizes() == ts::Shape{5, 7});
  ts::Tensor flat;
  ts::Tensor fc1_shard = ts::fsdp::units(saved.model)[0].shard;
  for (size_t i = 0; i < saved.adam->params().size(); ++i) {
    if (saved.adam->params()[i].is_same(fc1_shard)) flat = saved.adam->state(i).at("exp_avg");
  }
  REQUIRE(flat.defined());
  CHECK(same_bits(exp_avg.view({-1}), flat.narrow(0, 0, 35)));
  CHECK(file.contains("optimizer.state.scale.exp_avg_sq"));
  CHECK(file.size() == model.size() + 2 * 5);  // 5 parameters, 2 Adam tensors each
  ts::io::Metadata metadata = ts::io::load_metadata(path);
  CHECK(metadata.at("format") == "tessera.full-checkpoint");

  Trained loaded(one_rank(), 1, 77);
  poison(loaded);
  check_state(ckpt::load_full(path, loaded.model, loaded.with()), sample_state());
  check_same(loaded.model.state_dict(), saved.model.state_dict());
  check_same(loaded.adam->state_dict(), saved.adam->state_dict());
  check_same(loaded.scheduler->state_dict(), saved.scheduler->state_dict());
  // checkpoint::load tells the kinds apart.
  poison(loaded);
  ckpt::load(path, loaded.model, loaded.with());
  check_same(loaded.adam->state_dict(), saved.adam->state_dict());
}

TEST_CASE("NO_SHARD models save and load like sharded ones") {
  TempDir dir;
  Trained saved(one_rank(), 3, 3, ts::fsdp::ShardingStrategy::no_shard);
  ckpt::save_sharded(dir.file("c"), saved.model, saved.with(), {});
  Trained loaded(one_rank(), 1, 9);  // FULL_SHARD
  poison(loaded);
  ckpt::load_sharded(dir.file("c"), loaded.model, loaded.with());
  check_same(loaded.model.state_dict(), saved.model.state_dict());
  check_same(loaded.adam->state_dict(), saved.adam->state_dict());
}

TEST_CASE("a model with batch norm (ResNet) round-trips through sharded and full checkpoints, at 1 and 3 ranks' layouts") {
  // Batch norm's buffers include a 0-d num_batches_tracked, which a flat view once refused.
  TempDir dir;
  auto make = [](uint64_t seed) {
    auto model = ts::models::resnet18({.num_classes = 3, .width = 4});
    model->reset_parameters(seed);
    ts::fsdp::fully_shard(*model, one_rank(), {.wrap_policy = ts::fsdp::WrapPolicy::module_type({"BasicBlock"})});
    return model;
  };
  auto trained = make(1);
  ts::optim::SGD sgd(trained->parameters(), {.lr = 0.1, .momentum = 0.9});
  ts::Generator gen(5);
  for (int step = 0; step < 2; ++step) {
    sgd.zero_grad();
    ts::cross_entropy(trained(ts::randn({4, 3, 32, 32}, gen)), ts::randint(0, 3, {4}, gen)).backward();
    sgd.step();
  }
  const ts::StateDict expected = trained->state_dict();
  CHECK(expected.at("bn1.num_batches_tracked").dim() == 0);
  CHECK(expected.at("bn1.num_batches_tracked").to_vector<int64_t>() == std::vector<int64_t>{2});

  ckpt::save_sharded(dir.file("sharded"), *trained, {.optimizer = &sgd}, {.step = 2});
  ckpt::save_full(dir.file("full.safetensors"), *trained, {.optimizer = &sgd}, {.step = 2});
  ckpt::ShardedCheckpoint sharded(dir.file("sharded"));
  ckpt::write_sharded(sharded, dir.file("three"), 3);
  for (const std::string& path : {dir.file("sharded"), dir.file("full.safetensors"), dir.file("three")}) {
    CAPTURE(path);
    auto target = make(7);
    ts::optim::SGD target_sgd(target->parameters(), {.lr = 0.1, .momentum = 0.9});
    CHECK(ckpt::load(path, *target, {.optimizer = &target_sgd}).step == 2);
    check_same(target->state_dict(), expected);
  }
}

TEST_CASE("the manager keeps the last N, moves latest, replaces a step and drops abandoned ones") {
  TempDir dir;
  const std::string root = dir.file("ckpts");
  ckpt::CheckpointManager manager(root, {.keep_last = 2});
  Trained trained(one_rank(), 1);
  CHECK_FALSE(manager.latest().has_value());
  CHECK_FALSE(manager.restore(trained.model, trained.with()).has_value());
  for (uint64_t step = 1; step <= 5; ++step) {
    std::string path = manager.save(trained.model, trained.with(), {.step = step});
    CHECK(path == root + "/" + ckpt::CheckpointManager::directory_name(step));
  }
  CHECK(ckpt::CheckpointManager::directory_name(5) == "step-00000005");
  CHECK(manager.checkpoints() == std::vector<std::string>{root + "/step-00000004", root + "/step-00000005"});
  CHECK(manager.latest() == root + "/step-00000005");
  CHECK(ts::testing::read_file_bytes(root + "/latest") == "step-00000005\n");

  // Leftovers of crashed saves are cleaned up by the next save.
  std::filesystem::create_directory(root + "/.step-00000009.tmp");
  ts::testing::write_file_bytes(root + "/.latest.tmp-123-0", "x");
  // Saving step 5 again replaces it whole.
  manager.save(trained.model, trained.with(), {.step = 5, .epoch = 42});
  CHECK(entries_of(root) ==
        std::vector<std::string>{".lock", "latest", "step-00000004", "step-00000005"});
  ckpt::TrainingState back = *manager.restore(trained.model, trained.with());
  CHECK(back.epoch == 42);

  // Resumed from step 4 and saved at 3: the later checkpoints belonged to an abandoned run.
  manager.save(trained.model, trained.with(), {.step = 3});
  CHECK(manager.checkpoints() == std::vector<std::string>{root + "/step-00000003"});
  CHECK(ckpt::load(root, trained.model, trained.with()).step == 3);  // a root loads its latest

  ckpt::CheckpointManager keep_all(dir.file("all"));
  for (uint64_t step : {10, 20, 30}) keep_all.save(trained.model, {}, {.step = step});
  CHECK(keep_all.checkpoints().size() == 3);
}

TEST_CASE("a checkpoint that does not fit is refused and nothing changes") {
  TempDir dir;
  Trained saved(one_rank(), 2);
  ckpt::save_sharded(dir.file("c"), saved.model, saved.with(), {});

  Trained target(one_rank(), 1, 9);
  ts::StateDict before = target.model.state_dict();
  ts::StateDict optimizer_before = target.adam->state_dict();

  struct Wider : ts::nn::Module {
    ts::nn::Linear fc1{7, 6}, fc2{6, 3};
    ts::Tensor scale = ts::ones({3});
    ts::Tensor counts = ts::zeros({4}, {.dtype = ts::DType::i64});
    Wider() {
      register_parameter("scale", scale);
      register_buffer("counts", counts);
      register_modules({{"fc1", fc1}, {"fc2", fc2}});
    }
  } wider;
  ts::fsdp::fully_shard(wider, one_rank());
  std::string error = error_of([&] { ckpt::load_sharded(dir.file("c"), wider, {}); });
  CHECK(contains(error, "unit 'fc1'"));
  CHECK(contains(error, "fc1.weight [5, 7]"));
  CHECK(contains(error, "fc1.weight [6, 7]"));

  ts::optim::SGD sgd(target.model.parameters(), {.lr = 0.1});
  error = error_of([&] { ckpt::load_sharded(dir.file("c"), target.model, {.optimizer = &sgd}); });
  CHECK(contains(error, "holds Adam state, but the optimizer is SGD"));
  check_same(target.model.state_dict(), before);  // refused before anything changed

  ckpt::save_sharded(dir.file("bare"), saved.model, {}, {});
  error = error_of([&] { ckpt::load_sharded(dir.file("bare"), target.model, target.with()); });
  CHECK(contains(error, "holds no optimizer state"));
  check_same(target.adam->state_dict(), optimizer_before);

  SmallNet unsharded;
  error = error_of([&] { ckpt::load_sharded(dir.file("c"), unsharded, {}); });
  CHECK(contains(error, "not sharded"));
  error = error_of([&] { ckpt::load(dir.file("nowhere"), target.model, {}); });
  CHECK(contains(error, "nowhere"));

  // A NaN in `extra` has no JSON form: the save fails before writing anything.
  ckpt::TrainingState bad;
  bad.extra.set("loss", std::nan(""));
  CHECK_THROWS_AS(ckpt::save_sharded(dir.file("nan"), saved.model, {}, bad), ts::ValueError);
  CHECK_FALSE(std::filesystem::exists(dir.file("nan")));
}

namespace {

// Random inputs of SmallNet's width, targets unused (the loss is the output's mean square).
class Vectors : public ts::data::Dataset {
 public:
  Vectors() {
    ts::Generator gen(8);
    x_ = ts::randn({20, 7}, gen);
  }
  int64_t size() const override { return 20; }
  ts::data::Batch get_batch(const std::vector<int64_t>& indices) const override {
    ts::data::Batch batch;
    batch.data = ts::empty({static_cast<int64_t>(indices.size()), 7});
    for (size_t r = 0; r < indices.size(); ++r) batch.data.narrow(0, static_cast<int64_t>(r), 1).copy_(x_.narrow(0, indices[r], 1));
    batch.target = ts::zeros({static_cast<int64_t>(indices.size())}, {.dtype = ts::DType::i64});
    return batch;
  }

 private:
  ts::Tensor x_;
};

// The loop of docs/checkpoints.md, as written there; returns the losses it computed.
std::vector<double> documented_loop(const std::string& root, int epochs) {
  SmallNet model;
  model.reset_parameters(4);
  ts::fsdp::fully_shard(model, one_rank());
  ts::optim::Adam adam(model.parameters(), {.lr = 0.01});
  ts::optim::StepLR step_lr(adam, 1, 0.5);
  Vectors data;
  uint64_t seed = 21;
  ts::data::DataLoader loader(data, {.batch_size = 6, .shuffle = true, .seed = seed});
  std::vector<double> losses;

  namespace ckpt = ts::checkpoint;
  ckpt::CheckpointManager checkpoints(root, {.keep_last = 3});
  ckpt::Stateful with{.optimizer = &adam, .scheduler = &step_lr};
  ckpt::TrainingState state{.seed = seed};
  if (auto restored = checkpoints.restore(model, with)) state = *restored;      // collective
  for (; state.epoch < epochs; ++state.epoch, state.batch = 0) {
    for (const auto& batch : loader.epoch(state.epoch, state.batch)) {          // resumes mid-epoch
      ts::nn::BatchScope scope({.seed = state.seed, .step = state.step, .first_row = batch.first_row});
      adam.zero_grad();
      ts::Tensor loss = model(batch.data).pow(2.0).mean();
      loss.backward();
      adam.step();
      losses.push_back(loss.item<double>());
      ++state.step;
      state.batch = batch.index + 1;
      if (state.step % 5 == 0) checkpoints.save(model, with, state);          // collective
    }
    step_lr.step();
  }
  return losses;
}

}  // namespace

TEST_CASE("the loop in docs/checkpoints.md resumes mid-epoch with the same losses") {
  TempDir dir;
  const std::string root = dir.file("ckpt");
  std::vector<double> uninterrupted = documented_loop(root, 3);  // 4 batches an epoch: 12 steps
  REQUIRE(uninterrupted.size() == 12);
  ckpt::CheckpointManager manager(root);
  CHECK(manager.checkpoints().size() == 2);  // steps 5 and 10
  // Stopped after step 5 (epoch 1, batch 1): resume from there.
  ts::io::AtomicFile pointer(root + "/latest");
  pointer.write("step-00000005\n", 14);
  pointer.commit();
  std::vector<double> resumed = documented_loop(root, 3);
  CHECK(resumed == std::vector<double>(uninterrupted.begin() + 5, uninterrupted.end()));
}
