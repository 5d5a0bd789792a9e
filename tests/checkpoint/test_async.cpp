// Asynchronous saves (CheckpointManagerOptions::async_save) and the refusal of non-finite
// state, at one rank: an asynchronous save writes the very files a synchronous save of the
// same state writes, even while training changes the model before it is done; its staged
// copy is counted and named in memory reports, and refused past a memory limit; a failed
// background write is reported by the next poll(), once, with `latest` left on the previous
// checkpoint; NaN or infinite state is refused naming the element, or, when allowed,
// recorded so that rotation never prunes the newest finite checkpoint. (Two ranks: the
// MNIST example's tests; kill -9 during asynchronous writes: test_crash.cpp.)
#include "checkpoint_test_support.h"

#include <sys/resource.h>

#include <chrono>
#include <thread>

using namespace checkpoint_test;
using ts::testing::TempDir;

namespace {

std::shared_ptr<ts::dist::ProcessGroup> one_rank() { return std::make_shared<ts::dist::SingleProcessGroup>(); }

// Two more Adam steps of `trained`: every shard and moment changes.
void train_more(Trained& trained) {
  ts::Generator gen(77);
  for (int step = 0; step < 2; ++step) {
    trained.adam->zero_grad();
    trained.model(ts::randn({4, 7}, gen)).pow(2.0).mean().backward();
    trained.adam->step();
  }
}

std::string file_text(const std::string& path) { return ts::testing::read_file_bytes(path); }

// Element `index` of `trained`'s flat parameter `name` ("fc1._flat_param") set to `value`.
void set_flat_element(Trained& trained, const std::string& name, int64_t index, float value) {
  ts::NoGradGuard no_grad;
  for (auto& [parameter_name, parameter] : trained.model.named_parameters()) {
    if (parameter_name == name) static_cast<float*>(parameter.data_ptr())[index] = value;
  }
}

}  // namespace

TEST_CASE("an asynchronous save writes what a synchronous one does, while training goes on changing the model") {
  TempDir dir;
  Trained trained(one_rank(), 3);
  const ckpt::TrainingState state{.step = 3, .epoch = 1, .batch = 2, .seed = 5};
  ckpt::CheckpointManager sync(dir.file("sync"));
  ckpt::CheckpointManager async(dir.file("async"), {.async_save = true});
  sync.save(trained.model, trained.with(), state);
  const std::string path = async.save(trained.model, trained.with(), state);
  CHECK(path == dir.file("async") + "/step-00000003");
  const ts::StateDict model_at_save = trained.model.state_dict();
  const ts::StateDict adam_at_save = trained.adam->state_dict();
  train_more(trained);  // before the write is known to be done: it must not see this
  async.wait();
  CHECK_FALSE(async.poll());  // nothing in flight

  CHECK(async.latest() == path);
  for (const std::string& name : {"metadata.json", "rank-00000-of-00001.safetensors"}) {
    CAPTURE(name);
    CHECK(file_text(dir.file("async") + "/step-00000003/" + name) == file_text(dir.file("sync") + "/step-00000003/" + name));
  }
  Trained loaded(one_rank(), 1, /*seed=*/99);
  poison(loaded);
  CHECK(ckpt::load(dir.file("async"), loaded.model, loaded.with()).step == 3);  // its latest
  check_same(loaded.model.state_dict(), model_at_save);
  check_same(loaded.adam->state_dict(), adam_at_save);
  CHECK(ckpt::ShardedCheckpoint(path).manifest().finite == true);

  // The next saves wait for the one before; keep_last and latest work as synchronous ones do.
  for (uint64_t step = 4; step <= 6; ++step) async.save(trained.model, trained.with(), {.step = step});
  async.wait();
  CHECK(async.latest() == dir.file("async") + "/step-00000006");
  CHECK(async.checkpoints().size() == 4);
}

TEST_CASE("an optimizer of original parameters in two groups: the asynchronous save's files equal the synchronous one's") {
  TempDir dir;
  SmallNet model;
  model.reset_parameters(4);
  ts::fsdp::fully_shard(model, one_rank());
  std::vector<ts::Tensor> weights, others;
  std::vector<std::string> weight_names, other_names;
  for (auto& [name, parameter] : ts::fsdp::named_original_parameters(model)) {
    const bool weight = name.find("weight") != std::string::npos;
    (weight ? weights : others).push_back(parameter);
    (weight ? weight_names : other_names).push_back(name);
  }
  ts::optim::AdamW adamw({{weights, {.weight_decay = 0.1}}, {others, {.weight_decay = 0.0}}}, {.lr = 0.01});
  ts::Generator gen(8);
  for (int step = 0; step < 2; ++step) {
    adamw.zero_grad();
    model(ts::randn({4, 7}, gen)).pow(2.0).mean().backward();
    adamw.step();
  }
  ckpt::CheckpointManager sync(dir.file("sync"));
  ckpt::CheckpointManager async(dir.file("async"), {.async_save = true});
  sync.save(model, {.optimizer = &adamw}, {.step = 2});
  async.save(model, {.optimizer = &adamw}, {.step = 2});
  async.wait();
  for (const std::string& name : {"metadata.json", "rank-00000-of-00001.safetensors"}) {
    CAPTURE(name);
    CHECK(file_text(dir.file("async") + "/step-00000002/" + name) == file_text(dir.file("sync") + "/step-00000002/" + name));
  }

  // Optimizer state is not checked: Adam's second moment may overflow to infinity while the
  // weights stay finite (issue #32's diverging GPT-2 run did at step 5). A NaN in one
  // parameter of its own is found, named as the original parameter.
  const size_t fc2_bias = weights.size() + static_cast<size_t>(std::find(other_names.begin(), other_names.end(), "fc2.bias") -
                                                                other_names.begin());
  ts::Tensor moment = adamw.state(fc2_bias).at("exp_avg_sq");
  static_cast<float*>(moment.data_ptr())[2] = std::numeric_limits<float>::infinity();
  for (ckpt::CheckpointManager* manager : {&sync, &async}) {
    CHECK(error_of([&] { manager->save(model, {.optimizer = &adamw}, {.step = 3}); manager->wait(); }).empty());
  }
  {
    ts::NoGradGuard no_grad;
    for (auto& [name, flat] : model.named_parameters()) {
      if (name == "fc2._flat_param") static_cast<float*>(flat.data_ptr())[16 + 2] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  for (ckpt::CheckpointManager* manager : {&sync, &async}) {
    CHECK(contains(error_of([&] { manager->save(model, {.optimizer = &adamw}, {.step = 4}); }),
                   "rank 0: parameter 'fc2.bias' (unit 'fc2') holds nan at element 2 of its 3"));
  }
}

TEST_CASE("the staged copy is counted, named when an allocation is refused, and refused past the memory limit") {
  TempDir dir;
  Trained trained(one_rank(), 2);
  ckpt::CheckpointManager manager(dir.file("ckpt"), {.async_save = true});
  CHECK(manager.staging_bytes() == 0);
  manager.save(trained.model, trained.with(), {.step = 2});
  manager.wait();
  // Every unit's flat parameter and its two Adam moments, float32, and the int64 buffer.
  const ckpt::Manifest manifest = ckpt::ShardedCheckpoint(dir.file("ckpt") + "/step-00000002").manifest();
  int64_t expected = 0;
  for (const ckpt::UnitRecord& unit : manifest.units) {
    expected += unit.flat_numel * 4 * static_cast<int64_t>(1 + unit.state_tensors.size());
  }
  expected += 4 * 8;
  CHECK(manager.staging_bytes() == expected);
  manager.save(trained.model, trained.with(), {.step = 3});  // the same buffers again
  manager.wait();
  CHECK(manager.staging_bytes() == expected);

  ts::release_cached_memory(ts::Device::cpu());
  const int64_t in_use = ts::memory_stats(ts::Device::cpu()).reserved_bytes;
  {
    ts::MemoryLimitGuard limit(ts::Device::cpu(), in_use + (int64_t{1} << 20));
    const std::string refused = error_of([] { (void)ts::empty({int64_t{1} << 20}); });  // 4 MiB
    CHECK(contains(refused, "staged copy for asynchronous checkpoint saves to '" + dir.file("ckpt") + "'"));
  }
  // A new manager has no buffers yet: staging past the limit fails the save, which leaves
  // nothing behind.
  Trained big(one_rank(), 1);
  ckpt::CheckpointManager fresh(dir.file("fresh"), {.async_save = true});
  ts::release_cached_memory(ts::Device::cpu());
  {
    ts::MemoryLimitGuard limit(ts::Device::cpu(), ts::memory_stats(ts::Device::cpu()).reserved_bytes + 64);
    std::string message;
    try {
      fresh.save(big.model, big.with(), {.step = 1});
    } catch (const ts::OutOfMemoryError& error) {
      message = error.what();
    }
    CHECK(contains(message, "memory limit"));
  }
  fresh.wait();
  CHECK_FALSE(fresh.latest().has_value());
  CHECK(fresh.checkpoints().empty());
}

TEST_CASE("a failed background write is reported by the next poll, once, and latest stays on the previous checkpoint") {
  TempDir dir;
  Trained trained(one_rank(), 1);
  const std::string root = dir.file("ckpt");
  {
    ckpt::CheckpointManager manager(root, {.keep_last = 2, .async_save = true});
    for (uint64_t step : {1, 2, 3}) manager.save(trained.model, trained.with(), {.step = step});
    manager.wait();
  }
  const std::string outcome = in_forked_child([&] {
    ckpt::CheckpointManager manager(root, {.keep_last = 2, .async_save = true});
    manager.restore(trained.model, trained.with());
    struct rlimit limit{.rlim_cur = 1024, .rlim_max = RLIM_INFINITY};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return std::string("setrlimit failed");
    std::string said = error_of([&] { manager.save(trained.model, trained.with(), {.step = 4}); });
    if (!said.empty()) return "save() itself failed: " + said;
    // Training goes on; each step polls. The write fails within moments.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    std::string reported;
    int polls = 0;
    while (reported.empty() && std::chrono::steady_clock::now() < until) {
      reported = error_of([&] { manager.poll(); });
      ++polls;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const std::string again = error_of([&] { manager.wait(); manager.poll(); });
    limit.rlim_cur = RLIM_INFINITY;
    ::setrlimit(RLIMIT_FSIZE, &limit);
    const std::string latest_then = manager.latest().value_or("none");
    // The run can go on saving once the cause is gone.
    const std::string next = error_of([&] { manager.save(trained.model, trained.with(), {.step = 5}); manager.wait(); });
    return reported + "\n" + (again.empty() ? "reported once" : "reported again: " + again) + "\n" + latest_then +
           "\n" + (next.empty() ? "next save ok" : next) + "\n" + manager.latest().value_or("none");
  });
  INFO(outcome);
  CHECK(contains(outcome, "the asynchronous save of checkpoint '" + root + "/step-00000004' failed: "));
  CHECK(contains(outcome, "File too large (this process may write files of at most 1024 bytes: ulimit -f)"));
  CHECK(contains(outcome, "\nreported once\n" + root + "/step-00000003\nnext save ok\n" + root + "/step-00000005"));
  ckpt::CheckpointManager manager(root);
  CHECK(manager.checkpoints() == std::vector<std::string>{root + "/step-00000003", root + "/step-00000005"});
}

TEST_CASE("non-finite state is refused naming the element, or saved as such; rotation keeps the newest finite checkpoint") {
  for (bool async : {false, true}) {
    CAPTURE(async);
    TempDir dir;
    const std::string root = dir.file("ckpt");
    Trained trained(one_rank(), 2);
    {
      ckpt::CheckpointManager manager(root, {.keep_last = 2, .async_save = async});
      for (uint64_t step : {1, 2}) manager.save(trained.model, trained.with(), {.step = step});
      set_flat_element(trained, "fc1._flat_param", 7, std::numeric_limits<float>::quiet_NaN());
      const std::string refused = error_of([&] {
        manager.save(trained.model, trained.with(), {.step = 3});
        manager.wait();
      });
      CHECK(contains(refused, "rank 0: parameter 'fc1.weight' (unit 'fc1') holds nan at element 7 of its 35: "
                              "refusing to save non-finite state"));
      CHECK(contains(refused, "CheckpointManagerOptions::allow_non_finite"));
      CHECK(manager.latest() == root + "/step-00000002");
      CHECK(manager.checkpoints().size() == 2);
      set_flat_element(trained, "fc1._flat_param", 7, 0.5f);
      set_flat_element(trained, "fc2._flat_param", 17, -std::numeric_limits<float>::infinity());  // fc2.bias[1]
      CHECK(contains(error_of([&] { manager.save(trained.model, trained.with(), {.step = 3}); manager.wait(); }),
                     "parameter 'fc2.bias' (unit 'fc2') holds -inf at element 1 of its 3"));
    }
    // Allowed: saved and recorded as not finite. Rotation keeps two, and step 2, the newest
    // finite one, beyond them.
    ckpt::CheckpointManager manager(root, {.keep_last = 2, .overwrite = true, .async_save = async, .allow_non_finite = true});
    for (uint64_t step : {3, 4, 5}) manager.save(trained.model, trained.with(), {.step = step});
    manager.wait();
    CHECK(manager.checkpoints() ==
          std::vector<std::string>{root + "/step-00000002", root + "/step-00000004", root + "/step-00000005"});
    CHECK(ckpt::ShardedCheckpoint(root + "/step-00000002").manifest().finite == true);
    CHECK(ckpt::ShardedCheckpoint(root + "/step-00000005").manifest().finite == false);
    // Finite again: ordinary rotation, and step 2 goes.
    set_flat_element(trained, "fc2._flat_param", 17, 1.0f);
    for (uint64_t step : {6, 7}) manager.save(trained.model, trained.with(), {.step = step});
    manager.wait();
    CHECK(manager.checkpoints() == std::vector<std::string>{root + "/step-00000006", root + "/step-00000007"});
  }
}
