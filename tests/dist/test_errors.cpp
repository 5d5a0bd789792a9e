// Misuse that every rank sees locally (wrong sizes, dtypes, layouts, roots, devices) and
// misuse only debug mode can see (ranks issuing different collectives), which must fail on
// every rank with every rank's call in the message.
#include <doctest/doctest.h>

#include "dist_test_support.h"
#include "test_support.h"

namespace ts = tessera;
using dist_test::error_of;
using ts::dist::ReduceOp;

using test_support::contains;

namespace {

}  // namespace

TEST_CASE("wrong sizes name the rank, the group, both shapes and the world size") {
  ts::dist::ProcessGroup& world = *dist_test::world();
  const int size = world.size();
  std::string on_rank = "on rank " + std::to_string(world.rank()) + " of group 'world' (size " + std::to_string(size) + ")";
  uint64_t sequence = world.next_sequence();

  std::string gather = error_of([&] { world.all_gather_into(ts::zeros({size * 3 + 1}), ts::zeros({3})); });
  CHECK(contains(gather, "all_gather_into " + on_rank));
  CHECK(contains(gather, "Tensor[" + std::to_string(size * 3 + 1) + "] float32 cpu"));
  CHECK(contains(gather, "Tensor[3] float32 cpu"));
  CHECK(contains(gather, "world size " + std::to_string(size)));
  CHECK_THROWS_AS(world.all_gather_into(ts::zeros({size * 3 + 1}), ts::zeros({3})), ts::ShapeError);

  std::string scatter = error_of([&] { world.reduce_scatter_into(ts::zeros({2, 2}), ts::zeros({size * 4 + 2})); });
  CHECK(contains(scatter, "reduce_scatter_into " + on_rank));
  CHECK(contains(scatter, "Tensor[2, 2] float32 cpu"));
  CHECK(contains(scatter, "Tensor[" + std::to_string(size * 4 + 2) + "] float32 cpu"));

  // A refused call takes no sequence number: the ranks stay in step.
  CHECK(world.next_sequence() == sequence);
}

TEST_CASE("dtypes, layouts, roots and undefined tensors are checked before anything is sent") {
  ts::dist::ProcessGroup& world = *dist_test::world();
  const int size = world.size();

  std::string dtypes = error_of([&] {
    world.all_gather_into(ts::zeros({size * 2}, {.dtype = ts::DType::f64}), ts::zeros({2}));
  });
  CHECK(contains(dtypes, "float64"));
  CHECK(contains(dtypes, "float32"));
  CHECK(contains(dtypes, "differ in dtype"));

  ts::Tensor transposed = ts::zeros({3, 4}).t();
  std::string layout = error_of([&] { world.all_reduce(transposed); });
  CHECK(contains(layout, "must be contiguous"));
  CHECK(contains(layout, "Tensor[4, 3] float32 cpu (strides [1, 4])"));
  CHECK(contains(layout, "on rank " + std::to_string(world.rank())));

  std::string average = error_of([&] { world.all_reduce(ts::zeros({2}, {.dtype = ts::DType::i64}), ReduceOp::avg); });
  CHECK(contains(average, "ReduceOp::avg needs a floating dtype"));
  CHECK(contains(average, "int64"));
  CHECK_THROWS_AS(world.reduce_scatter_into(ts::zeros({1}, {.dtype = ts::DType::u8}),
                                            ts::zeros({size}, {.dtype = ts::DType::u8}), ReduceOp::avg),
                  ts::DTypeError);

  std::string root = error_of([&] { world.broadcast(ts::zeros({2}), size); });
  CHECK(contains(root, "root rank " + std::to_string(size) + " is outside [0, " + std::to_string(size) + ")"));
  CHECK_THROWS_AS(world.broadcast(ts::zeros({2}), -1), ts::IndexError);

  CHECK(contains(error_of([&] { world.all_reduce(ts::Tensor()); }), "undefined tensor"));
}

TEST_CASE("a CUDA tensor without a usable device fails at the call, on every rank alike, taking no number") {
  ts::dist::ProcessGroup& world = *dist_test::world();
  if (world.backend() != ts::dist::Backend::mpi || ts::cuda::is_available()) return;
  // The MPI group stages CUDA tensors through host memory; here the staging copy cannot
  // reach a device. A deferred storage allocates nothing until that copy asks for it.
  auto impl = std::make_shared<ts::TensorImpl>();
  impl->storage = std::make_shared<ts::Storage>(
      16, ts::Device::cuda(0), ts::PendingInit{.rule = ts::InitRule::constant(0), .dtype = ts::DType::f32, .key = "x"});
  impl->sizes = {4};
  impl->strides = {1};
  ts::Tensor on_gpu(impl);
  uint64_t before = world.next_sequence();
  std::string message = error_of([&] { world.all_reduce(on_gpu); });
  CHECK(contains(message, ts::cuda::is_compiled() ? "cuda:0 requested, but 0 CUDA devices are visible"
                                                  : "Tessera was built without CUDA support"));
  CHECK(world.next_sequence() == before);
  world.barrier();  // the group is still in step
}

TEST_CASE("debug mode: different collectives fail on every rank, naming each rank's call") {
  std::shared_ptr<ts::dist::ProcessGroup> world = dist_test::world();
  std::shared_ptr<ts::dist::ProcessGroup> checked = world->duplicate({.debug_checks = true});
  CHECK(checked->debug_checks());
  const int size = checked->size();
  const int rank = checked->rank();
  if (size == 1) return;  // one rank cannot disagree with itself

  // Even ranks all-reduce ten floats, odd ranks broadcast three from rank 0.
  uint64_t sequence = checked->next_sequence();
  std::string prefix = "#" + std::to_string(sequence) + " ";
  ts::Tensor tensor = ts::zeros({rank % 2 == 0 ? 10 : 3});
  std::string message;
  try {
    if (rank % 2 == 0) {
      checked->all_reduce(tensor);
    } else {
      checked->broadcast(tensor, 0);
    }
  } catch (const ts::dist::CollectiveMismatch& mismatch) {
    message = mismatch.what();
  }
  INFO(message);
  CHECK(contains(message, "collective mismatch on group '" + checked->name() + "' (seen on rank " +
                              std::to_string(rank) + ","));
  CHECK(contains(message, ": " + prefix + "all_reduce(sum) float32 x 10"));
  CHECK(contains(message, ": " + prefix + "broadcast float32 x 3 from rank 0"));
  CHECK(contains(message, size == 2 ? "rank 0: #" : "ranks 0, 2: #"));
  CHECK(contains(message, size <= 3 ? "rank 1: #" : "ranks 1, 3: #"));
  CHECK(tensor.to_vector<float>() == std::vector<float>(tensor.numel(), 0.0f));  // nothing was sent

  // Same op, different counts: each rank's count is listed.
  ts::Tensor uneven = ts::zeros({rank + 1}, {.dtype = ts::DType::f64});
  std::string counts = error_of([&] { checked->all_reduce(uneven, ReduceOp::max); });
  for (int other = 0; other < size; ++other) {
    CHECK(contains(counts, "all_reduce(max) float64 x " + std::to_string(other + 1)));
  }

  // Every rank skipped the mismatched calls alike, so the group goes on working.
  ts::Tensor after = ts::full({4}, rank + 1);
  checked->all_reduce(after);
  CHECK(after.to_vector<float>() == std::vector<float>(4, size * (size + 1) / 2.0f));
  CHECK(checked->next_sequence() == sequence + 3);
}

TEST_CASE("debug mode passes matching calls through unchanged") {
  std::shared_ptr<ts::dist::ProcessGroup> checked = dist_test::world()->duplicate({.debug_checks = true});
  const int size = checked->size();
  ts::Tensor output = ts::full({size * 2}, -1, {.dtype = ts::DType::i64});
  checked->all_gather_into(output, ts::full({2}, checked->rank(), {.dtype = ts::DType::i64}));
  std::vector<int64_t> values = output.to_vector<int64_t>();
  for (int64_t j = 0; j < size * 2; ++j) CHECK(values[j] == j / 2);
  auto pending = checked->barrier_async();
  pending->wait();
  CHECK(pending->is_completed());
}
