// The dist tests' main: starts the world group (init() picks MPI under mpirun, one rank
// otherwise), then runs doctest on every rank.
//
// Only rank 0 prints doctest's full report; the other ranks print their failures only
// (doctest's "minimal" mode), so the output does not interleave N summaries. After each
// test case the ranks all-gather whether it failed, so a failure on any rank is reported
// by rank 0 with the ranks it happened on, and every rank exits non-zero.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "dist_test_support.h"

namespace ts = tessera;

namespace {

std::shared_ptr<ts::dist::ProcessGroup> world_group;
bool failed_on_another_rank = false;

// A doctest listener: at the end of every test case, every rank learns which ranks failed.
class RankAgreement : public doctest::IReporter {
 public:
  explicit RankAgreement(const doctest::ContextOptions&) {}

  void test_case_end(const doctest::CurrentTestCaseStats& stats) override {
    if (!world_group) return;
    bool failed_here = stats.failure_flags != 0 || stats.numAssertsFailedCurrentTest > 0;
    ts::Tensor mine = ts::full({1}, failed_here ? 1 : 0, {.dtype = ts::DType::i64});
    ts::Tensor per_rank = ts::zeros({world_group->size()}, {.dtype = ts::DType::i64});
    world_group->all_gather_into(per_rank, mine);
    std::string failed_ranks;
    for (int rank = 0; rank < world_group->size(); ++rank) {
      if (per_rank.at<int64_t>({rank}) != 0) failed_ranks += (failed_ranks.empty() ? "" : ", ") + std::to_string(rank);
    }
    if (failed_ranks.empty()) return;
    if (!failed_here) failed_on_another_rank = true;
    if (world_group->rank() == 0) {
      std::fprintf(stderr, "test case '%s' failed on rank(s) %s of %d\n", current_test_name_.c_str(),
                   failed_ranks.c_str(), world_group->size());
    }
  }
  void test_case_start(const doctest::TestCaseData& data) override { current_test_name_ = data.m_name; }

  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}

 private:
  std::string current_test_name_;
};

REGISTER_LISTENER("rank_agreement", 1, RankAgreement);

}  // namespace

namespace dist_test {
const std::shared_ptr<ts::dist::ProcessGroup>& world() { return world_group; }
}  // namespace dist_test

int main(int argc, char** argv) {
  world_group = ts::dist::init(argc, argv);
#ifdef DIST_TEST_REQUIRES_CUDA
  // The gpu suite's multi-rank tests: every rank skips alike (exit code 77) without a device.
  if (!ts::cuda::is_available()) {
    if (world_group->rank() == 0) std::printf("gpu dist tests skipped: %s\n", ts::cuda::unavailable_reason().c_str());
    world_group.reset();
    return 77;
  }
#endif
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  if (world_group->rank() != 0) context.setOption("minimal", true);
  // mpirun hands ranks a terminal, but N ranks' colour codes only garble each other.
  if (world_group->size() > 1) context.setOption("no-colors", true);
  int result = context.run();
  if (context.shouldExit()) return result;

  // Every rank exits with the same verdict.
  ts::Tensor verdict = ts::full({1}, (result != 0 || failed_on_another_rank) ? 1 : 0, {.dtype = ts::DType::i64});
  world_group->all_reduce(verdict, ts::dist::ReduceOp::max);
  int exit_code = verdict.item<int64_t>() != 0 ? 1 : 0;
  world_group.reset();  // the cached world in init() finalizes MPI at exit
  return exit_code;
}
