// examples/gpt2 --device cuda as a user runs it, on a tiny GPT and a token file whose next
// token is predictable: float32 over the one-rank NCCL group must give the CPU run's
// losses (TF32 off: float32 products on both; 1e-3 relative leaves room for cuBLAS's other
// summation order over 4 steps), bfloat16 mixed precision its first loss within bfloat16's
// rounding (2e-2) and finite losses after. scripts/gpu-check also trains it under mpirun.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>
#include <tessera/tessera.h>

#include "gpu_test.h"
#include "run_program.h"
#include "test_support.h"

namespace ts = tessera;
namespace json = tessera::io::json;

using test_support::contains;

namespace {

std::vector<double> losses(const std::string& out) {
  std::vector<double> found;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line.front() != '{') continue;
    json::Value event = json::parse(line);
    if (event.at("event").as_string() == "train") found.push_back(event.at("loss").as_double());
  }
  return found;
}

}  // namespace

TEST_CASE("examples/gpt2 --device cuda: float32 gives the CPU's losses; bfloat16 trains") {
  if (!gpu_test::cuda_target()) return;
  ts::testing::TempDir dir;
  std::vector<uint16_t> tokens(4096);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(100 + i % 32);
  ts::data::write_token_file(dir / "train.bin", tokens);
  const std::string common = test_support::program_from_env("GPT2_EXAMPLE") + " --data " + (dir / "train.bin").string() +
                             " --n-layer 2 --n-head 2 --n-embd 64 --block-size 32 --batch-size 4 --steps 4 --lr 0.01" +
                             " --warmup-steps 1 --threads 2 --json";
  test_support::ProgramRun cpu = test_support::run_program(common);
  INFO(cpu.err);
  REQUIRE(cpu.status == 0);
  const std::vector<double> expected = losses(cpu.out);
  REQUIRE(expected.size() == 4);

  test_support::ProgramRun f32 = test_support::run_program(common + " --device cuda");
  INFO(f32.out, f32.err);
  REQUIRE(f32.status == 0);
  CHECK(contains(f32.out, "cuda:0"));
  if (ts::dist::nccl_is_compiled()) CHECK(contains(f32.out, "collectives on nccl"));
  const std::vector<double> gpu = losses(f32.out);
  REQUIRE(gpu.size() == 4);
  for (size_t i = 0; i < gpu.size(); ++i) CHECK(gpu[i] == doctest::Approx(expected[i]).epsilon(1e-3));

  test_support::ProgramRun bf16 = test_support::run_program(common + " --device cuda --mixed-precision bf16");
  INFO(bf16.out, bf16.err);
  REQUIRE(bf16.status == 0);
  CHECK(contains(bf16.out, "bfloat16 compute"));
  const std::vector<double> mixed = losses(bf16.out);
  REQUIRE(mixed.size() == 4);
  CHECK(mixed[0] == doctest::Approx(expected[0]).epsilon(2e-2));
  for (double loss : mixed) CHECK(std::isfinite(loss));
}
