// tessera-checkpoint as a user runs it: --help, info, verify, to-full and to-sharded on a
// checkpoint written by the library, the exit status and messages of corrupt input and
// usage errors.
#include "checkpoint_test_support.h"

#include "run_program.h"

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
  for (const char* word : {"info PATH", "verify PATH", "to-full PATH OUT.safetensors", "to-sharded PATH OUT_DIR --world-size N"}) {
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
