// examples/mnist --device cuda as a user runs it, on a small fake dataset in MNIST's
// layout: float32 over the one-rank NCCL group, bfloat16 mixed precision, and the staged
// world group. Each must train an epoch and report it. (The real dataset's accuracy is
// checked by scripts/gpu-check, which trains on MNIST itself.)
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <tessera/tessera.h>

#include "gpu_test.h"
#include "run_program.h"
#include "test_support.h"

namespace ts = tessera;
namespace fs = std::filesystem;

using test_support::contains;

namespace {

void write_idx(const fs::path& file, const std::vector<uint32_t>& sizes, const std::vector<uint8_t>& data) {
  std::ofstream out(file, std::ios::binary);
  const char header[4] = {0, 0, 0x08, static_cast<char>(sizes.size())};
  out.write(header, 4);
  for (uint32_t size : sizes) {
    const char bytes[4] = {static_cast<char>(size >> 24), static_cast<char>(size >> 16), static_cast<char>(size >> 8),
                           static_cast<char>(size)};
    out.write(bytes, 4);
  }
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

// `samples` images whose pixels encode their label, so the network can learn.
void write_split(const fs::path& root, const std::string& prefix, uint32_t samples) {
  std::vector<uint8_t> images, labels;
  for (uint32_t i = 0; i < samples; ++i) {
    uint8_t label = static_cast<uint8_t>(i % 10);
    labels.push_back(label);
    for (int p = 0; p < 784; ++p) images.push_back(static_cast<uint8_t>((p / 78 == label) ? 255 : (i * 13 + p) % 40));
  }
  write_idx(root / (prefix + "-images-idx3-ubyte"), {samples, 28, 28}, images);
  write_idx(root / (prefix + "-labels-idx1-ubyte"), {samples}, labels);
}

using Run = test_support::ProgramRun;

// Standard output and error together in `out`, as the terminal shows them.
Run run_example(const std::string& arguments) {
  Run run = test_support::run_program(test_support::program_from_env("MNIST_EXAMPLE") + " " + arguments);
  run.out += run.err;
  return run;
}

}  // namespace

TEST_CASE("examples/mnist --device cuda trains an epoch: float32 on NCCL, bfloat16, and the world group") {
  if (!gpu_test::cuda_target()) return;
  ts::testing::TempDir data;
  write_split(data.path(), "train", 96);
  write_split(data.path(), "t10k", 40);
  const std::string common = "--data " + data.path().string() + " --epochs 1 --batch-size 16 --test-batch-size 20 --json";
  struct Variant {
    std::string flags, expect;
  };
  for (const Variant& v : {Variant{"--device cuda", "collectives on nccl"},
                           Variant{"--device cuda --mixed-precision bf16", "bfloat16 compute"},
                           Variant{"--device cuda --dist-backend world --optimizer sgd --lr 0.05", "collectives on single"}}) {
    CAPTURE(v.flags);
    Run run = run_example(common + " " + v.flags);
    CHECK(run.status == 0);
    CHECK_MESSAGE(contains(run.out, "\"event\":\"epoch\""), run.out);
    CHECK_MESSAGE(contains(run.out, "cuda:0"), run.out);
    if (ts::dist::nccl_is_compiled() || !contains(v.expect, "nccl")) CHECK_MESSAGE(contains(run.out, v.expect), run.out);
  }
}
