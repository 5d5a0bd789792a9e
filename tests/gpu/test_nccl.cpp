// The NCCL process group at one rank (one GPU): every collective and dtype, the in-place
// layouts, asynchronous calls and their ordering against the compute stream, tensors kept
// alive while the collective's stream reads them, debug mode, duplicate() and the errors.
// At one rank a reduction is the identity and a gather a copy, so expected values are
// exact; the ordering tests use tensors large enough (64 Mi elements) that a collective
// started before its input was written, or a read started before the collective ended,
// would see other values.
#include <doctest/doctest.h>

#include <tessera/tessera.h>

#include "gpu_test.h"
#include "test_support.h"

namespace ts = tessera;
using ts::DType;
using ts::Tensor;
using ts::dist::ReduceOp;

using test_support::contains;

namespace {

// The one-rank NCCL group on cuda:0, or null where the suite cannot make one.
std::shared_ptr<ts::dist::ProcessGroup> nccl_group(bool debug = false) {
  if (!gpu_test::cuda_target()) return nullptr;
  if (!ts::dist::nccl_is_compiled()) {
    FAIL_CHECK("this Tessera was built without NCCL: the gpu suite needs it (-Dnccl=enabled)");
    return nullptr;
  }
  auto world = ts::dist::init();
  REQUIRE(world->size() == 1);
  ts::dist::GroupOptions options;
  options.device = 0;
  options.debug_checks = debug;
  return ts::dist::new_group(world, ts::dist::Backend::nccl, options);
}

Tensor on_device(const Tensor& host) { return host.to(ts::Device::cuda(0)); }

}  // namespace

TEST_CASE("nccl: the group at one rank and its collectives in every dtype") {
  auto group = nccl_group();
  if (!group) return;
  CHECK(group->backend() == ts::dist::Backend::nccl);
  CHECK(group->size() == 1);
  CHECK(group->rank() == 0);
  CHECK(ts::dist::nccl_device(*group) == 0);
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::i64, DType::u8}) {
    CAPTURE(dtype);
    Tensor values = on_device(ts::arange(0, 100, 1, {.dtype = DType::i64}).to(dtype));
    Tensor gathered = ts::full({100}, 7, {.dtype = dtype, .device = ts::Device::cuda(0)});
    group->all_gather_into(gathered, values);
    CHECK(gathered.cpu().to_vector<double>() == values.cpu().to_vector<double>());

    Tensor scattered = ts::full({100}, 7, {.dtype = dtype, .device = ts::Device::cuda(0)});
    group->reduce_scatter_into(scattered, values, ReduceOp::sum);
    CHECK(scattered.cpu().to_vector<double>() == values.cpu().to_vector<double>());
    group->reduce_scatter_into(scattered, values, ReduceOp::max);
    CHECK(scattered.cpu().to_vector<double>() == values.cpu().to_vector<double>());

    Tensor reduced = values.clone();
    group->all_reduce(reduced, ReduceOp::sum);
    group->all_reduce(reduced, ReduceOp::max);
    if (ts::is_floating(dtype)) group->all_reduce(reduced, ReduceOp::avg);  // ncclAvg
    CHECK(reduced.cpu().to_vector<double>() == values.cpu().to_vector<double>());

    Tensor sent = values.clone();
    group->broadcast(sent, 0);
    CHECK(sent.cpu().to_vector<double>() == values.cpu().to_vector<double>());
  }
  // Empty tensors, and a 2-D output of size() * n elements.
  Tensor empty = ts::empty({0}, {.device = ts::Device::cuda(0)});
  group->all_gather_into(empty, empty);
  group->all_reduce(empty);
  Tensor matrix = ts::zeros({2, 3}, {.device = ts::Device::cuda(0)});
  group->all_gather_into(matrix, on_device(ts::arange(0, 6, 1, {.dtype = DType::f32})));
  CHECK(matrix.cpu().to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});
  uint64_t before = group->next_sequence();
  group->barrier();  // waits on the host too
  CHECK(group->next_sequence() == before + 1);
}

TEST_CASE("nccl: in-place layouts and inputs that overlap their output") {
  auto group = nccl_group();
  if (!group) return;
  const ts::Device device = ts::Device::cuda(0);
  // FSDP's all-gather: the shard is the rank's slice of the flat buffer (NCCL in place).
  Tensor flat = ts::full({10}, -1, {.device = device});
  Tensor shard = flat.narrow(0, 2, 5);
  shard.copy_(on_device(ts::arange(0, 5, 1, {.dtype = DType::f32})));
  group->all_gather_into(flat.narrow(0, 2, 5), shard);
  CHECK(flat.cpu().to_vector<float>() == std::vector<float>{-1, -1, 0, 1, 2, 3, 4, -1, -1, -1});
  // A reduce-scatter whose output is the input itself (the head at rank 0: NCCL in place).
  Tensor buffer = on_device(ts::arange(0, 4, 1, {.dtype = DType::f32}));
  group->reduce_scatter_into(buffer, buffer, ReduceOp::sum);
  CHECK(buffer.cpu().to_vector<float>() == std::vector<float>{0, 1, 2, 3});
  // Overlapping another way: the input is copied first, and the result is still right.
  Tensor shifted = on_device(ts::arange(0, 6, 1, {.dtype = DType::f32}));
  group->all_gather_into(shifted.narrow(0, 0, 4), shifted.narrow(0, 2, 4));
  CHECK(shifted.cpu().to_vector<float>() == std::vector<float>{2, 3, 4, 5, 4, 5});
}

TEST_CASE("nccl: collectives start after the kernels queued before them and finish before those queued after wait()") {
  auto group = nccl_group();
  if (!group) return;
  const ts::Device device = ts::Device::cuda(0);
  const int64_t n = int64_t{64} << 20;
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    // The input is written by kernels just before the call; the output read by kernels just after wait().
    Tensor input = ts::zeros({n}, {.device = device}).add_(round + 1.0).mul_(3.0);
    Tensor output = ts::empty({n}, {.device = device});
    auto work = group->all_gather_into_async(output, input);
    work->wait();  // the compute stream waits; the host does not
    Tensor total = (output * 2.0).sum();
    CHECK(total.item<float>() == doctest::Approx(6.0 * (round + 1) * n).epsilon(1e-6));
    CHECK(work->is_completed());
  }
}

TEST_CASE("nccl: a call's tensors stay alive until the compute stream is ordered after it") {
  auto group = nccl_group();
  if (!group) return;
  const ts::Device device = ts::Device::cuda(0);
  const int64_t n = int64_t{64} << 20;
  Tensor output = ts::empty({n}, {.device = device});
  std::shared_ptr<ts::dist::Work> work;
  {
    Tensor input = ts::full({n}, 5.0, {.device = device});
    work = group->all_gather_into_async(output, input);
  }  // the caller drops the input while the collective may still read it
  // The same size again: the caching allocator would hand out the input's block if the
  // Work had let it go, and these kernels would overwrite it.
  Tensor other = ts::full({n}, -9.0, {.device = device});
  work->wait();
  CHECK(output.max().item<float>() == 5.0f);
  CHECK((-output).max().item<float>() == -5.0f);
  CHECK(other.max().item<float>() == -9.0f);
  // A Work dropped unwaited still orders the compute stream before letting its tensors go.
  {
    Tensor input = ts::full({n}, 4.0, {.device = device});
    group->all_reduce_async(input, ReduceOp::sum);
  }
  Tensor reused = ts::full({n}, 1.0, {.device = device});
  CHECK(reused.sum().item<float>() == doctest::Approx(static_cast<double>(n)).epsilon(1e-6));
}

TEST_CASE("nccl: debug mode, duplicate(), and what the group refuses") {
  auto checked = nccl_group(/*debug=*/true);
  if (!checked) return;
  CHECK(checked->debug_checks());
  Tensor values = on_device(ts::arange(0, 8, 1, {.dtype = DType::f32}));
  checked->all_reduce(values);  // fingerprints exchanged over NCCL first
  CHECK(values.cpu().to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7});

  auto copy = checked->duplicate({.debug_checks = false});
  CHECK(copy->backend() == ts::dist::Backend::nccl);
  CHECK(!copy->debug_checks());
  copy->broadcast(values, 0);
  CHECK(values.cpu().to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7});

  std::string refused;
  try {
    checked->all_reduce(ts::zeros({4}));
  } catch (const ts::DeviceError& error) {
    refused = error.what();
  }
  CHECK(contains(refused, "this NCCL group carries CUDA tensors on cuda:0"));
  CHECK(contains(refused, "Tensor[4] float32 cpu"));
  CHECK_THROWS_AS(checked->all_reduce(on_device(ts::zeros({4}, {.dtype = DType::i64})), ReduceOp::avg),
                  ts::DTypeError);
}
