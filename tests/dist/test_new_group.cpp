// new_group and what can be checked of the NCCL backend without a GPU: which groups can
// be made from which, the errors for a missing device or a build without NCCL, and the
// NCCL status check's message. The NCCL collectives themselves run in the gpu suite.
#include <doctest/doctest.h>

#include "dist_test_support.h"
#include "tessera/config.h"
#include "tessera/dist/nccl_check.h"
#include "test_support.h"

namespace ts = tessera;
using dist_test::error_of;
using ts::dist::Backend;

using test_support::contains;

namespace {

}  // namespace

TEST_CASE("new_group with the parent's own backend is a duplicate; other CPU backends are refused") {
  auto world = dist_test::world();
  auto same = ts::dist::new_group(world, world->backend(), {.debug_checks = true});
  CHECK(same->backend() == world->backend());
  CHECK(same->size() == world->size());
  CHECK(same->rank() == world->rank());
  CHECK(same->debug_checks());
  CHECK(same->name().rfind(world->name() + ".", 0) == 0);
  ts::Tensor value = ts::ones({3});
  same->all_reduce(value);
  CHECK(value.to_vector<float>() == std::vector<float>(3, static_cast<float>(world->size())));

  Backend other = world->backend() == Backend::mpi ? Backend::single : Backend::mpi;
  std::string refused = error_of([&] { ts::dist::new_group(world, other); });
  CHECK(contains(refused, "cannot make a"));
  CHECK(contains(refused, "NCCL groups are made from it"));
  CHECK(contains(error_of([&] { ts::dist::new_group(nullptr, Backend::nccl); }), "no parent group"));
  CHECK(contains(error_of([&] { ts::dist::nccl_device(*world); }), "not an NCCL group"));
}

TEST_CASE("an NCCL group without a GPU, or without NCCL, is a clear error on every rank") {
  auto world = dist_test::world();
  if (ts::cuda::is_available()) return;  // the gpu suite makes real NCCL groups
  const uint64_t before = world->next_sequence();
  std::string implicit = error_of([&] { ts::dist::new_group(world, Backend::nccl); });
  std::string explicit_device = error_of([&] { ts::dist::new_group(world, Backend::nccl, {.device = 0}); });
  if (ts::dist::nccl_is_compiled()) {
    CHECK(contains(implicit, "no CUDA device for rank " + std::to_string(world->rank())));
    CHECK(contains(explicit_device, "cuda:0 requested, but 0 CUDA devices are visible"));
  } else {
    CHECK(contains(implicit, "built without NCCL"));
    CHECK(contains(implicit, "carries CUDA tensors too (staged through host memory)"));
    CHECK(implicit == explicit_device);
  }
  CHECK(world->next_sequence() == before);  // refused before any collective: the ranks stay in step
  CHECK_THROWS_AS(ts::dist::default_cuda_device(*world), ts::DeviceError);
}

#if TESSERA_HAS_NCCL
TEST_CASE("TS_NCCL_CHECK names the call, the file, the line and NCCL's words for the status") {
  constexpr int success = 0, invalid_argument = 4;  // ncclSuccess, ncclInvalidArgument
  CHECK_NOTHROW(TS_NCCL_CHECK(success));
  std::string message = error_of([] { TS_NCCL_CHECK(invalid_argument); });
  CHECK(contains(message, "invalid_argument failed at "));
  CHECK(contains(message, "test_new_group.cpp:"));
  CHECK(contains(message, "NCCL status 4 (invalid argument"));
  CHECK_THROWS_AS(TS_NCCL_CHECK(invalid_argument), ts::dist::DistError);
}
#endif
