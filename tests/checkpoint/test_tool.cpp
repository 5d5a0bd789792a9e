// tessera-checkpoint as a user runs it: --help, info, verify, to-full and to-sharded on a
// checkpoint written by the library, the exit status and messages of corrupt input and
// usage errors, and the outputs a conversion refuses (the input, a folder of the user's, a
// running job's folder) or writes through (a character device, a FIFO).
#include "checkpoint_test_support.h"

#include <map>

#include "run_program.h"
#include "special_files.h"

using namespace checkpoint_test;
using ts::testing::read_file_bytes;
using ts::testing::TempDir;

namespace {

using ToolRun = test_support::ProgramRun;

ToolRun run_tool(const std::string& arguments) {
  return test_support::run_program(test_support::program_from_env("TESSERA_CHECKPOINT_TOOL") + " " + arguments);
}

}  // namespace

TEST_CASE("tessera-checkpoint: help, info, verify, conversions, corrupt input and usage errors") {
  TempDir dir;
  Trained trained(std::make_shared<ts::dist::SingleProcessGroup>(), 3);
  ckpt::CheckpointManager manager(dir.file("ckpt"));
  manager.save(trained.model, trained.with(), {.step = 3, .epoch = 1, .batch = 2, .seed = 7});

  ToolRun help = run_tool("--help");
  CHECK(help.status == 0);
  for (const char* word : {"info PATH", "verify PATH", "to-full PATH OUT.safetensors [--model-only]", "to-sharded PATH OUT_DIR --world-size N"}) {
    CHECK_MESSAGE(contains(help.out, word), word);
  }

  ToolRun info = run_tool("info " + dir.file("ckpt"));  // a root: its latest
  INFO(info.out, info.err);
  CHECK(info.status == 0);
  for (const char* word : {"sharded checkpoint", "step-00000003", "world size: 1", "training: step 3, epoch 1, batch 2, seed 7",
                           "optimizer: Adam, 1 parameter group(s)", "group 0: lr=0.005", "scheduler: StepLR", "fc1: F32, flat parameter 'fc1._flat_param', 41 elements",
                           "fc1.weight", "[5, 7]", "optimizer state of fc1._flat_param: exp_avg, exp_avg_sq; step=3.0", "counts I64 [4]",
                           "rank-00000-of-00001.safetensors", "optimizer.fc1._flat_param.exp_avg"}) {
    CHECK_MESSAGE(contains(info.out, word), word);
  }

  ToolRun full = run_tool("to-full " + dir.file("ckpt") + " " + dir.file("full.safetensors"));
  CHECK(full.status == 0);
  CHECK(ts::io::load(dir.file("full.safetensors")).contains("optimizer.state.fc2.bias.exp_avg_sq"));
  // --model-only: the model's state dict alone (PyTorch's strict load_state_dict reads it):
  // exactly the model's names and shapes, the full file's bits, no optimizer state.
  ToolRun model_only = run_tool("to-full " + dir.file("ckpt") + " " + dir.file("model.safetensors") + " --model-only");
  INFO(model_only.out, model_only.err);
  CHECK(model_only.status == 0);
  CHECK(contains(model_only.out, "the model's state dict alone"));
  const ts::StateDict weights = ts::io::load(dir.file("model.safetensors"));
  const ts::StateDict expected = trained.model.state_dict();
  const ts::StateDict everything = ts::io::load(dir.file("full.safetensors"));
  CHECK(weights.size() == expected.size());
  for (const auto& [name, value] : expected) {
    CAPTURE(name);
    REQUIRE(weights.contains(name));
    CHECK(same_bits(weights.at(name), value));
    CHECK(same_bits(weights.at(name), everything.at(name)));
  }
  CHECK(ts::io::load_metadata(dir.file("model.safetensors")) == ts::io::Metadata{{"format", "pt"}});
  SmallNet fresh;
  fresh.load_state_dict(weights);  // strict
  CHECK(same_bits(fresh.fc2.weight, expected.at("fc2.weight")));
  CHECK(run_tool("to-full " + dir.file("ckpt") + " " + dir.file("x.safetensors") + " --model").status == 2);
  CHECK(run_tool("to-full " + dir.file("ckpt") + " --model-only").status == 2);
  ToolRun sharded = run_tool("to-sharded " + dir.file("full.safetensors") + " " + dir.file("three") + " --world-size 3");
  CHECK(sharded.status == 0);
  CHECK(ckpt::ShardedCheckpoint(dir.file("three")).metadata().world_size == 3);
  ToolRun full_info = run_tool("info " + dir.file("full.safetensors"));
  CHECK(full_info.status == 0);
  CHECK(contains(full_info.out, "full checkpoint"));
  CHECK(contains(full_info.out, "optimizer.state.fc1.weight.exp_avg"));
  ToolRun verified = run_tool("verify " + dir.file("three"));
  CHECK(verified.status == 0);
  CHECK(contains(verified.out, "OK (3 files"));

  // Corrupt: exit 1, the file and byte offset named.
  std::string file = dir.file("three/rank-00001-of-00003.safetensors");
  std::string bytes = read_file_bytes(file);
  bytes[bytes.size() - 1] = static_cast<char>(bytes.back() ^ 1);
  ts::testing::write_file_bytes(file, bytes);
  ToolRun corrupt = run_tool("verify " + dir.file("three"));
  CHECK(corrupt.status == 1);
  CHECK(contains(corrupt.err, "rank-00001-of-00003.safetensors: byte "));
  CHECK(contains(corrupt.err, "CRC32C mismatch"));

  CHECK(run_tool("").status == 2);
  CHECK(run_tool("frobnicate x").status == 2);
  CHECK(run_tool("to-sharded a b").status == 2);  // no --world-size
  // A world size is an integer from 1 to 99999 (five-digit rank file names), nothing else.
  for (const char* bad : {"1048576", "100000", "0", "-2", "0x10", "8.0", "1e3", " 8", ""}) {
    CAPTURE(bad);
    ToolRun refused = run_tool("to-sharded " + dir.file("full.safetensors") + " " + dir.file("refused") +
                               " --world-size '" + bad + "'");
    CHECK(refused.status == 2);
    CHECK(contains(refused.err, "--world-size expects an integer from 1 to 99999 (rank files are numbered with five "
                                "digits), got '" + std::string(bad) + "'"));
    CHECK_FALSE(std::filesystem::exists(dir.file("refused")));
  }
  ToolRun missing = run_tool("info " + dir.file("nowhere"));
  CHECK(missing.status == 1);
  CHECK(contains(missing.err, "nowhere"));
}

namespace {

// Every file under `root` with its bytes (symbolic links not followed), to show nothing was
// lost; but `.lock`, whose holder line each job that takes it rewrites.
std::map<std::string, std::string> tree_of(const std::string& root) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    const std::string name = std::filesystem::relative(entry.path(), root).string();
    if (name == ".lock") continue;
    files[name] = entry.is_regular_file() && !entry.is_symlink() ? read_file_bytes(entry.path()) : std::string("<other>");
  }
  return files;
}

}  // namespace

TEST_CASE("to-sharded writes only a new, empty or its own folder, apart from the input, and removes nothing else") {
  TempDir dir;
  Trained trained(std::make_shared<ts::dist::SingleProcessGroup>(), 3);
  const std::string root = dir.file("ckpt");
  {
    ckpt::CheckpointManager manager(root);
    for (uint64_t step : {1, 2}) manager.save(trained.model, trained.with(), {.step = step});
  }
  const auto checkpoints = tree_of(root);
  auto to_sharded = [&](const std::string& input, const std::string& output) {
    return run_tool("to-sharded '" + input + "' '" + output + "' --world-size 2");
  };
  auto refused = [&](const ToolRun& run, const std::string& said) {
    CHECK(run.status == 1);
    CHECK_MESSAGE(contains(run.err, said), run.err);
    CHECK(tree_of(root) == checkpoints);
  };

  // A folder of the user's files: refused, every file kept.
  const std::string notes = dir.file("notes");
  std::filesystem::create_directories(notes + "/deeper");
  ts::testing::write_file_bytes(notes + "/todo.txt", "mine");
  ts::testing::write_file_bytes(notes + "/deeper/more.txt", "also mine");
  const auto user_files = tree_of(notes);
  refused(to_sharded(root, notes), "the folder '" + notes + "' holds files tessera-checkpoint did not write: 'deeper', 'todo.txt'");
  CHECK(tree_of(notes) == user_files);

  // The input itself, inside it, above it: by any spelling (a trailing slash, "..", a symbolic link).
  refused(to_sharded(root, root), "is the input '" + root + "'");
  refused(to_sharded(root, root + "/"), "is the input");
  refused(to_sharded(root, root + "/step-00000002"), "lies inside the input");
  refused(to_sharded(root + "/step-00000002", root + "/step-00000002/../step-00000002"), "is the input");
  refused(to_sharded(root, dir.path().string()), "contains the input '" + root + "': writing it would remove the input");
  refused(to_sharded(root, root + "/.."), "contains the input");
  std::filesystem::create_directory_symlink(dir.path(), dir.file("link-to-parent"));
  refused(to_sharded(root, dir.file("link-to-parent")), "contains the input");
  std::filesystem::create_directory_symlink(root, dir.file("link-to-root"));
  refused(to_sharded(root, dir.file("link-to-root")), "is the input");

  // A regular file: refused, kept.
  ts::testing::write_file_bytes(dir.file("file.bin"), "bytes");
  refused(to_sharded(root, dir.file("file.bin")), "'" + dir.file("file.bin") + "' is a regular file, not a folder");
  CHECK(read_file_bytes(dir.file("file.bin")) == "bytes");

  // A running job's folder (its lock held) and a new folder beside its checkpoints: refused, naming the job.
  const std::string converted = dir.file("converted");
  REQUIRE(run_tool("to-full " + root + " " + dir.file("full.safetensors")).status == 0);
  {
    ckpt::CheckpointManager job(root);
    job.claim(*std::make_shared<ts::dist::SingleProcessGroup>(), true);
    const std::string pid = "pid " + std::to_string(::getpid()) + " on host '";
    ToolRun into_job = to_sharded(dir.file("full.safetensors"), root);
    refused(into_job, "(it is the checkpoint folder of a running job: " + pid);
    refused(to_sharded(dir.file("full.safetensors"), root + "/step-00000009"), "is in use by another job (" + pid);
    CHECK_FALSE(std::filesystem::exists(root + "/step-00000009"));
  }
  for (const std::string& name : entries_of(dir.path().string())) CHECK_MESSAGE(name.find(".tmp") == std::string::npos, name);

  // Allowed: a new folder (and its parents), an empty one, and one it wrote itself, again.
  REQUIRE(to_sharded(root, converted + "/two").status == 0);
  CHECK(ckpt::ShardedCheckpoint(converted + "/two").metadata().world_size == 2);
  std::filesystem::create_directory(dir.file("empty"));
  REQUIRE(to_sharded(root, dir.file("empty")).status == 0);
  CHECK(ckpt::ShardedCheckpoint(dir.file("empty")).metadata().world_size == 2);
  ToolRun again = run_tool("to-sharded " + root + " " + converted + "/two --world-size 3");
  REQUIRE_MESSAGE(again.status == 0, again.err);
  CHECK(entries_of(converted + "/two") ==
        std::vector<std::string>{ckpt::kConvertedMarker, "metadata.json", "rank-00000-of-00003.safetensors",
                                 "rank-00001-of-00003.safetensors", "rank-00002-of-00003.safetensors"});
  CHECK(ckpt::ShardedCheckpoint(converted + "/two").metadata().world_size == 3);
  // ... but not once the user has put a file of their own into it, nor a checkpoint it did not write.
  ts::testing::write_file_bytes(converted + "/two/readme", "mine");
  refused(to_sharded(root, converted + "/two"), "holds files tessera-checkpoint did not write: 'readme'");
  CHECK(read_file_bytes(converted + "/two/readme") == "mine");
  refused(to_sharded(dir.file("full.safetensors"), root + "/step-00000001"), "holds a sharded checkpoint that tessera-checkpoint did not write");
  CHECK(tree_of(root) == checkpoints);
}

TEST_CASE("to-full writes through to a character device or FIFO, refuses a folder, and never writes over its input") {
  TempDir dir;
  Trained trained(std::make_shared<ts::dist::SingleProcessGroup>(), 3);
  const std::string root = dir.file("ckpt");
  ckpt::CheckpointManager(root).save(trained.model, trained.with(), {.step = 3});
  REQUIRE(run_tool("to-full " + root + " " + dir.file("full.safetensors")).status == 0);
  const std::string full = read_file_bytes(dir.file("full.safetensors"));

  if (test_support::make_null_device(dir.file("null"))) {
    ToolRun to_null = run_tool("to-full " + root + " " + dir.file("null"));
    CHECK_MESSAGE(to_null.status == 0, to_null.err);
    CHECK(test_support::is_null_device(dir.file("null")));
  }
  REQUIRE(test_support::make_fifo(dir.file("pipe")));
  {
    test_support::FifoReader reader(dir.file("pipe"));
    REQUIRE(reader.opened());
    ToolRun to_pipe = run_tool("to-full " + root + " " + dir.file("pipe"));
    CHECK_MESSAGE(to_pipe.status == 0, to_pipe.err);
    CHECK(reader.bytes() == full);
  }
  std::filesystem::create_directory(dir.file("folder"));
  ToolRun to_folder = run_tool("to-full " + root + " " + dir.file("folder"));
  CHECK(to_folder.status == 1);
  CHECK(contains(to_folder.err, "cannot save to '" + dir.file("folder") + "': it is a directory"));
  ToolRun over_input = run_tool("to-full " + dir.file("full.safetensors") + " " + dir.file("full.safetensors"));
  CHECK(over_input.status == 1);
  CHECK(contains(over_input.err, "is the input"));
  ToolRun inside = run_tool("to-full " + root + " " + root + "/step-00000003/full.safetensors");
  CHECK(inside.status == 1);
  CHECK(contains(inside.err, "lies inside the input"));
  CHECK(read_file_bytes(dir.file("full.safetensors")) == full);
}
