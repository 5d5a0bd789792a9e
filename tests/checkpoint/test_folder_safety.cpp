// A checkpoint folder's safety, at one rank: resuming never silently starts from scratch
// while checkpoints exist (whatever happened to `latest`), a new run never prunes or
// replaces another run's checkpoints unless told to, two jobs cannot write one folder,
// files that are not regular files (FIFOs, directories) are refused at once, never
// waited on or misdescribed, and a save past the file size limit fails with a message.
#include "checkpoint_test_support.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

#include "special_files.h"
#include "tessera/checkpoint/folder_lock.h"

using namespace checkpoint_test;
using ts::testing::TempDir;
using ts::testing::write_file_bytes;

namespace {

std::shared_ptr<ts::dist::ProcessGroup> one_rank() { return std::make_shared<ts::dist::SingleProcessGroup>(); }

// A folder with step-1, step-2 and step-3 checkpoints, `latest` naming step 3.
std::string three_checkpoints(const TempDir& dir, Trained& trained) {
  const std::string root = dir.file("ckpt");
  ckpt::CheckpointManager manager(root);
  for (uint64_t step : {1, 2, 3}) manager.save(trained.model, trained.with(), {.step = step});
  return root;
}

// `action`'s error message, failing the test instead of hanging when it does not return
// within 10 s (a FIFO opened for reading waits for a writer forever).
std::string error_within_seconds(std::function<void()> action) {
  auto promise = std::make_shared<std::promise<std::string>>();
  std::future<std::string> result = promise->get_future();
  std::thread([promise, action = std::move(action)] { promise->set_value(error_of(action)); }).detach();
  REQUIRE_MESSAGE(result.wait_for(std::chrono::seconds(10)) == std::future_status::ready, "it hangs");
  return result.get();
}

}  // namespace

TEST_CASE("resume takes the newest complete checkpoint when latest is missing, dangling, a loop, a FIFO or corrupt") {
  TempDir dir;
  Trained trained(one_rank(), 1);
  const std::string root = three_checkpoints(dir, trained);
  const std::string latest = root + "/latest";
  struct Damage {
    const char* name;
    std::function<void()> apply;
    const char* said;
  };
  const std::vector<Damage> damages{
      {"missing", [&] { std::filesystem::remove(latest); }, "/latest' is missing"},
      {"dangling", [&] { std::filesystem::create_symlink("step-00000009", latest); },
       "/latest' is a symbolic link to 'step-00000009', which does not exist"},
      {"loop", [&] { std::filesystem::create_symlink("latest", latest); }, "/latest' is a symbolic link loop"},
      {"FIFO", [&] { REQUIRE(::mkfifo(latest.c_str(), 0644) == 0); }, "is a FIFO (named pipe), not a regular file"},
      {"corrupt", [&] { write_file_bytes(latest, "garbage"); }, "expected \"step-<digits>\\n\""},
      {"names a removed folder", [&] { write_file_bytes(latest, "step-00000004\n"); }, "is not a directory"},
  };
  for (const Damage& damage : damages) {
    CAPTURE(damage.name);
    std::filesystem::remove(latest);
    damage.apply();
    Trained target(one_rank(), 0, 9);
    ckpt::CheckpointManager manager(root);
    std::string note = error_within_seconds([&] {
      std::optional<ckpt::TrainingState> state = manager.restore(target.model, target.with());
      REQUIRE(state.has_value());
      CHECK(state->step == 3);
      throw ts::ValueError(manager.resumed_from()->note);  // hand the note out
    });
    CHECK(manager.resumed_from()->path == root + "/step-00000003");
    CHECK(contains(note, damage.said));
    CHECK(contains(note, "resuming from the newest complete checkpoint, " + root + "/step-00000003"));
    for (uint64_t step : {1, 2, 3}) CHECK(std::filesystem::exists(root + "/" + ckpt::CheckpointManager::directory_name(step)));
  }

  // The newest is incomplete (a rank file gone): the one before, saying why.
  std::filesystem::remove(latest);
  std::filesystem::remove(root + "/step-00000003/" + ckpt::rank_file_name(0, 1));
  Trained target(one_rank(), 0, 9);
  ckpt::CheckpointManager manager(root);
  CHECK(manager.restore(target.model, target.with())->step == 2);
  CHECK(contains(manager.resumed_from()->note, "(skipped: step-00000003: cannot open '" + root + "/step-00000003/rank-"));
}

TEST_CASE("the next save replaces a FIFO or a device node put in place of latest (its own file), never waits on it or writes into it") {
  TempDir dir;
  Trained trained(one_rank(), 1);
  const std::string root = three_checkpoints(dir, trained);
  const std::string latest = root + "/latest";
  struct Planted {
    const char* name;
    std::function<bool()> make;
  };
  const std::vector<Planted> planted{
      {"FIFO", [&] { return test_support::make_fifo(latest); }},
      {"character device", [&] { return test_support::make_null_device(latest); }},
  };
  for (const Planted& kind : planted) {
    CAPTURE(kind.name);
    std::filesystem::remove(latest);
    REQUIRE(kind.make());
    ckpt::CheckpointManager manager(root, {.overwrite = true});
    error_within_seconds([&] { manager.save(trained.model, trained.with(), {.step = 4}); });
    CHECK(std::filesystem::is_regular_file(std::filesystem::symlink_status(latest)));
    CHECK(ts::testing::read_file_bytes(latest) == "step-00000004\n");
  }
}

TEST_CASE("resume fails, never starts from scratch, when checkpoints exist but none is usable") {
  TempDir dir;
  Trained trained(one_rank(), 1);
  const std::string root = three_checkpoints(dir, trained);
  for (uint64_t step : {1, 2, 3}) std::filesystem::remove(root + "/" + ckpt::CheckpointManager::directory_name(step) + "/metadata.json");
  std::filesystem::remove(root + "/latest");
  Trained target(one_rank(), 0, 9);
  std::string message = error_of([&] { ckpt::CheckpointManager(root).restore(target.model, target.with()); });
  CHECK(contains(message, "cannot resume from '" + root + "': '" + root + "/latest' is missing"));
  CHECK(contains(message, "none of its step folders is a complete checkpoint: step-00000003: cannot open '"));

  // A dangling latest alone is not "nothing saved here" either.
  TempDir other;
  std::filesystem::create_directory(other.file("ckpt"));
  std::filesystem::create_symlink("step-00000005", other.file("ckpt/latest"));
  message = error_of([&] { ckpt::CheckpointManager(other.file("ckpt")).restore(target.model, target.with()); });
  CHECK(contains(message, "is a symbolic link to 'step-00000005', which does not exist, and it holds no step folder"));

  // An empty or absent folder is: restore() finds nothing and changes nothing.
  CHECK_FALSE(ckpt::CheckpointManager(dir.file("absent")).restore(target.model, target.with()).has_value());
}

TEST_CASE("a new run refuses a folder holding another run's checkpoints, unless told to overwrite them") {
  TempDir dir;
  Trained trained(one_rank(), 1);
  const std::string root = three_checkpoints(dir, trained);
  const std::vector<std::string> before = entries_of(root);
  for (int keep : {0, 1}) {
    ckpt::CheckpointManager fresh(root, {.keep_last = keep});
    std::string message = error_of([&] { fresh.save(trained.model, trained.with(), {.step = 1}); });
    CHECK(contains(message, "checkpoint folder '" + root + "' holds the checkpoints of another run (latest, "
                            "step-00000003, step-00000002, step-00000001), which this run's saves would prune or replace"));
    CHECK(contains(message, "--overwrite-checkpoints"));
    CHECK(entries_of(root) == before);  // nothing pruned, nothing replaced
  }
  ckpt::CheckpointManager early(root);
  CHECK(contains(error_of([&] { early.claim(*one_rank()); }), "holds the checkpoints of another run"));

  // Told to: the run takes the folder over (its first save prunes the later steps as usual).
  {
    ckpt::CheckpointManager overwrite(root, {.overwrite = true});
    overwrite.save(trained.model, trained.with(), {.step = 1});
    CHECK(overwrite.checkpoints() == std::vector<std::string>{root + "/step-00000001"});
  }
  // A run that resumed continues the folder: its saves may prune.
  ckpt::CheckpointManager resumed(root, {.keep_last = 1});
  Trained target(one_rank(), 0, 9);
  CHECK(resumed.restore(target.model, target.with())->step == 1);
  resumed.save(target.model, target.with(), {.step = 2});
  CHECK(resumed.checkpoints() == std::vector<std::string>{root + "/step-00000002"});
}

TEST_CASE("one job per checkpoint folder: a second is refused at once, naming the first") {
  TempDir dir;
  Trained trained(one_rank(), 1);
  const std::string root = dir.file("ckpt");
  {
    ckpt::CheckpointManager first(root);
    first.claim(*one_rank());
    ckpt::CheckpointManager second(root);
    std::string message = error_of([&] { second.claim(*one_rank()); });
    CHECK(contains(message, "the checkpoint folder '" + root + "' is in use by another job (pid " +
                                std::to_string(::getpid()) + " on host '"));
    CHECK(contains(message, "holds " + root + "/.lock)"));
    CHECK(contains(error_of([&] { second.save(trained.model, trained.with(), {.step = 1}); }), "in use by another job"));
  }
  // Released with the manager: the next job takes it.
  ckpt::CheckpointManager next(root);
  next.save(trained.model, trained.with(), {.step = 1});

  // Another process (a forked child) holding the lock, then killed: released by its death.
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    try {
      ckpt::detail::FolderLock lock(dir.file("other"));
      (void)::write(ready[1], "k", 1);
      ::pause();
    } catch (...) {
    }
    ::_exit(1);
  }
  char byte = 0;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  std::string message = error_of([&] { ckpt::detail::FolderLock lock(dir.file("other")); });
  CHECK(contains(message, "is in use by another job (pid " + std::to_string(child) + " on host '"));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  ckpt::detail::FolderLock after(dir.file("other"));
}

TEST_CASE("files that are not regular files are refused at once: a FIFO metadata.json, a folder as a rank file, a file as the root") {
  TempDir dir;
  Trained trained(one_rank(), 1);
  const std::string root = three_checkpoints(dir, trained);
  const std::string step = root + "/step-00000003";

  std::filesystem::rename(step + "/metadata.json", step + "/metadata.saved");
  REQUIRE(::mkfifo((step + "/metadata.json").c_str(), 0644) == 0);
  std::string message = error_within_seconds([&] { ckpt::ShardedCheckpoint checkpoint(step); });
  CHECK(contains(message, "cannot read '" + step + "/metadata.json': it is a FIFO (named pipe), not a regular file"));
  std::filesystem::remove(step + "/metadata.json");
  std::filesystem::rename(step + "/metadata.saved", step + "/metadata.json");

  const std::string rank_file = step + "/" + ckpt::rank_file_name(0, 1);
  std::filesystem::remove(rank_file);
  std::filesystem::create_directory(rank_file);
  message = error_of([&] { ckpt::ShardedCheckpoint(step).check_files(); });
  CHECK(contains(message, "cannot read '" + rank_file + "': it is a directory, not a regular file"));
  CHECK_FALSE(contains(message, "4096"));

  write_file_bytes(dir.file("a-file"), "x");
  Trained target(one_rank(), 0, 9);
  for (bool resume : {true, false}) {
    ckpt::CheckpointManager manager(dir.file("a-file"));
    message = error_of([&] {
      if (resume) {
        manager.restore(target.model, target.with());
      } else {
        manager.save(target.model, target.with(), {.step = 1});
      }
    });
    CHECK(contains(message, "checkpoint folder '" + dir.file("a-file") + "' is a regular file, not a folder"));
  }
}

TEST_CASE("a save past the file size limit (ulimit -f) fails with a message, not a silent SIGXFSZ death") {
  TempDir dir;
  Trained trained(one_rank(), 1);
  const std::string root = three_checkpoints(dir, trained);
  const std::string message = in_forked_child([&] {
    const struct rlimit limit{.rlim_cur = 1024, .rlim_max = RLIM_INFINITY};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return std::string("setrlimit failed");
    ckpt::CheckpointManager manager(root);
    return error_of([&] {
      manager.restore(trained.model, trained.with());
      manager.save(trained.model, trained.with(), {.step = 4});
    });
  });
  CHECK(contains(message, "cannot save '" + root + "/"));
  CHECK(contains(message, "File too large (this process may write files of at most 1024 bytes: ulimit -f)"));
  // The failed save left the previous checkpoints as they were.
  ckpt::CheckpointManager manager(root);
  CHECK(manager.latest() == root + "/step-00000003");
  Trained target(one_rank(), 0, 9);
  CHECK(manager.restore(target.model, target.with())->step == 3);
}
