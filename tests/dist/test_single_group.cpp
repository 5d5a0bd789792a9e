// The single-rank group (what init() returns without mpirun), and the debug mode's
// fingerprints and messages, which need no MPI to check.
#include <doctest/doctest.h>

#include "dist_test_support.h"

namespace ts = tessera;
using dist_test::error_of;
using ts::dist::CallFingerprint;
using ts::dist::ReduceOp;

TEST_CASE("SingleProcessGroup: copies for gathers and scatters, nothing for the rest") {
  auto group = std::make_shared<ts::dist::SingleProcessGroup>();
  CHECK(group->rank() == 0);
  CHECK(group->size() == 1);
  CHECK(group->backend_name() == "single");
  CHECK(group->name() == "world");

  ts::Tensor input = ts::tensor<float>({1, 2, 3});
  ts::Tensor output = ts::zeros({3, 1});
  group->all_gather_into(output, input);
  CHECK(output.to_vector<float>() == std::vector<float>{1, 2, 3});

  ts::Tensor scattered = ts::zeros({3}, {.dtype = ts::DType::f64});
  group->reduce_scatter_into(scattered, ts::tensor<double>({4, 5, 6}), ReduceOp::avg);
  CHECK(scattered.to_vector<double>() == std::vector<double>{4, 5, 6});

  ts::Tensor reduced = ts::tensor<int64_t>({7, 8});
  group->all_reduce(reduced, ReduceOp::max);
  group->broadcast(reduced, 0);
  CHECK(reduced.to_vector<int64_t>() == std::vector<int64_t>{7, 8});
  group->barrier();

  auto work = group->all_reduce_async(reduced);
  CHECK(work->is_completed());
  CHECK(work->description() == "#5 all_reduce(sum) int64 x 2 on group 'world'");
  CHECK(group->next_sequence() == 6);

  // The same argument checks as every group.
  CHECK(error_of([&] { group->broadcast(reduced, 1); }).find("root rank 1 is outside [0, 1)") != std::string::npos);
  CHECK_THROWS_AS(group->all_gather_into(ts::zeros({4}), input), ts::ShapeError);
  CHECK_THROWS_AS(group->all_reduce(reduced, ReduceOp::avg), ts::DTypeError);

  // Overlapping input and output are copied safely.
  ts::Tensor buffer = ts::tensor<float>({1, 2, 3, 4});
  group->all_gather_into(buffer.narrow(0, 1, 3), buffer.narrow(0, 0, 3));
  CHECK(buffer.to_vector<float>() == std::vector<float>{1, 1, 2, 3});

  auto copy = group->duplicate({.debug_checks = true});
  CHECK(copy->name() == "world.1");
  CHECK(copy->debug_checks());
  CHECK(group->duplicate()->name() == "world.2");
}

TEST_CASE("fingerprints describe calls and equal fingerprints give no mismatch") {
  ts::dist::CollectiveCall gather{.kind = ts::dist::CollectiveKind::all_gather, .input = ts::zeros({1024}),
                                  .output = ts::zeros({2048}), .sequence = 5};
  CHECK(ts::dist::describe(gather) == "#5 all_gather float32 x 1024");
  ts::dist::CollectiveCall broadcast{.kind = ts::dist::CollectiveKind::broadcast,
                                     .input = ts::zeros({3}, {.dtype = ts::DType::f64}),
                                     .output = ts::zeros({3}, {.dtype = ts::DType::f64}), .root = 1, .sequence = 2};
  CHECK(ts::dist::describe(broadcast) == "#2 broadcast float64 x 3 from rank 1");
  CHECK(ts::dist::describe(ts::dist::CollectiveCall{.kind = ts::dist::CollectiveKind::barrier, .sequence = 7}) ==
        "#7 barrier");
  // The device is part of the fingerprint: a CPU call on one rank and a CUDA call on another differ.
  auto impl = std::make_shared<ts::TensorImpl>();
  impl->storage = std::make_shared<ts::Storage>(
      4096, ts::Device::cuda(0), ts::PendingInit{.rule = ts::InitRule::constant(0), .dtype = ts::DType::f32, .key = "x"});
  impl->sizes = {1024};
  impl->strides = {1};
  ts::Tensor on_gpu(impl);
  ts::dist::CollectiveCall gather_on_gpu{.kind = ts::dist::CollectiveKind::all_gather, .input = on_gpu,
                                         .output = on_gpu, .sequence = 5};
  CHECK(ts::dist::describe(gather_on_gpu) == "#5 all_gather float32 x 1024 cuda");
  CHECK_FALSE(ts::dist::fingerprint_of(gather_on_gpu) == ts::dist::fingerprint_of(gather));

  CallFingerprint one = ts::dist::fingerprint_of(gather);
  CHECK(ts::dist::mismatch_message({one, one, one}, "world", 0).empty());
}

TEST_CASE("a mismatch message groups ranks by the call they issued") {
  ts::dist::CollectiveCall gather{.kind = ts::dist::CollectiveKind::all_gather, .input = ts::zeros({1024}),
                                  .output = ts::zeros({3072}), .sequence = 5};
  ts::dist::CollectiveCall reduce{.kind = ts::dist::CollectiveKind::all_reduce, .input = ts::zeros({10}),
                                  .output = ts::zeros({10}), .reduce_op = ReduceOp::sum, .sequence = 5};
  CallFingerprint a = ts::dist::fingerprint_of(gather);
  CallFingerprint b = ts::dist::fingerprint_of(reduce);
  std::string message = ts::dist::mismatch_message({a, b, a}, "world", 2);
  CHECK(message.find("collective mismatch on group 'world' (seen on rank 2") != std::string::npos);
  CHECK(message.find("ranks 0, 2: #5 all_gather float32 x 1024; rank 1: #5 all_reduce(sum) float32 x 10") !=
        std::string::npos);

  // A sequence number alone differing is a mismatch too (a rank skipped a call).
  CallFingerprint later = a;
  later.sequence = 6;
  CHECK(ts::dist::mismatch_message({a, later}, "world", 0).find("rank 1: #6 all_gather") != std::string::npos);
}

TEST_CASE("TESSERA_DIST_DEBUG is read strictly") {
  CHECK_FALSE(ts::dist::parse_debug_mode(nullptr));
  CHECK_FALSE(ts::dist::parse_debug_mode(""));
  CHECK_FALSE(ts::dist::parse_debug_mode("0"));
  CHECK(ts::dist::parse_debug_mode("1"));
  std::string message = error_of([] { ts::dist::parse_debug_mode("yes"); });
  CHECK(message.find("TESSERA_DIST_DEBUG=yes") != std::string::npos);
}

TEST_CASE("TESSERA_DIST_TIMEOUT is read strictly, in seconds, 10 minutes when unset") {
  using std::chrono::milliseconds;
  CHECK(ts::dist::parse_timeout(nullptr) == milliseconds(600'000));
  CHECK(ts::dist::parse_timeout("") == ts::dist::kDefaultTimeout);
  CHECK(ts::dist::parse_timeout("30") == milliseconds(30'000));
  CHECK(ts::dist::parse_timeout("2.5") == milliseconds(2'500));
  CHECK(ts::dist::parse_timeout("1e3") == milliseconds(1'000'000));
  for (const char* bad : {"0", "-5", "ten", "5s", "inf", "nan", "0x10", "1e30", " 5"}) {
    std::string message = error_of([&] { ts::dist::parse_timeout(bad); });
    CHECK_MESSAGE(message.find(std::string("TESSERA_DIST_TIMEOUT=") + bad + ": expected the collective timeout in seconds") !=
                      std::string::npos,
                  bad, ": ", message);
  }
}

TEST_CASE("a group's timeout: given at construction, inherited by duplicates unless they set their own") {
  using std::chrono::milliseconds;
  auto group = std::make_shared<ts::dist::SingleProcessGroup>("world", false, milliseconds(1500));
  CHECK(group->timeout() == milliseconds(1500));
  CHECK(group->duplicate()->timeout() == milliseconds(1500));
  CHECK(group->duplicate({.timeout = milliseconds(250)})->timeout() == milliseconds(250));
  CHECK(ts::dist::SingleProcessGroup().timeout() == ts::dist::kDefaultTimeout);
  CHECK(error_of([] { ts::dist::SingleProcessGroup("g", false, milliseconds(0)); }).find("must be positive") !=
        std::string::npos);
}

TEST_CASE("init() returns the same world each time, of the backend the launch implies") {
  auto world = ts::dist::init();
  CHECK(world == dist_test::world());
  CHECK(world->backend() == (ts::dist::launched_by_mpirun() ? ts::dist::Backend::mpi : ts::dist::Backend::single));
  CHECK(world->debug_checks() == ts::dist::debug_mode_from_environment());
  CHECK(world->timeout() == ts::dist::timeout_from_environment());
}
