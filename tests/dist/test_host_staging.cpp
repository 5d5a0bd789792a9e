// The MPI group's host staging, which carries CUDA tensors when several ranks share one
// GPU: every tensor is copied to a host buffer on the calling thread, the collective runs
// on host buffers, and the result is copied back into the caller's tensor on the
// communication thread before the Work completes. GroupOptions::force_host_staging runs
// CPU tensors through the same path, so the staging logic (fresh host buffers, in-place
// layouts, the copy back, asynchronous calls) is checked here without a GPU; the device
// copies themselves are checked by the gpu suite (tests/gpu/test_gpu_dist.cpp).
// Expected values are small integers or halves, exact in every dtype used.
#include <doctest/doctest.h>

#include <vector>

#include "dist_test_support.h"

namespace ts = tessera;
using ts::Tensor;
using ts::dist::ReduceOp;

namespace {

std::shared_ptr<ts::dist::ProcessGroup> staged_group() {
  auto world = dist_test::world();
  if (world->backend() != ts::dist::Backend::mpi) return nullptr;
  return world->duplicate({.force_host_staging = true});
}

std::vector<float> iota(int64_t count, float scale, float offset) {
  std::vector<float> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) values[i] = offset + scale * static_cast<float>(i);
  return values;
}

}  // namespace

TEST_CASE("host staging: every collective gives the unstaged results") {
  auto staged = staged_group();
  if (!staged) return;  // one rank without a launcher: the single group does not stage
  const int size = staged->size();
  const int rank = staged->rank();
  CHECK(staged->backend() == ts::dist::Backend::mpi);

  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1001}}) {
    INFO("rank ", rank, " of ", size, ", n = ", n);
    Tensor input = ts::tensor<float>(iota(n, 1, 1000.0f * rank));
    Tensor gathered = ts::full({size, n}, -1);
    staged->all_gather_into(gathered, input);
    std::vector<float> expected;
    for (int r = 0; r < size; ++r) {
      std::vector<float> part = iota(n, 1, 1000.0f * r);
      expected.insert(expected.end(), part.begin(), part.end());
    }
    CHECK(gathered.to_vector<float>() == expected);
    CHECK(input.to_vector<float>() == iota(n, 1, 1000.0f * rank));  // the input is left alone

    // Rank r contributes (r + 1) * (j + 1).
    std::vector<double> contribution(static_cast<size_t>(size * n));
    for (int64_t j = 0; j < size * n; ++j) contribution[j] = (rank + 1.0) * static_cast<double>(j + 1);
    Tensor contributions = ts::tensor<double>(contribution);
    Tensor summed = ts::full({n}, -1, {.dtype = ts::DType::f64});
    staged->reduce_scatter_into(summed, contributions, ReduceOp::sum);
    Tensor averaged = ts::full({n}, -1, {.dtype = ts::DType::f64});
    staged->reduce_scatter_into(averaged, contributions, ReduceOp::avg);
    for (int64_t i = 0; i < n; ++i) {
      const double j = static_cast<double>(rank * n + i + 1);
      CHECK(summed.to_vector<double>()[i] == j * size * (size + 1) / 2);
      CHECK(averaged.to_vector<double>()[i] == j * (size + 1) / 2.0);
    }

    Tensor reduced = ts::full({n}, rank + 1, {.dtype = ts::DType::i64});
    staged->all_reduce(reduced, ReduceOp::max);
    CHECK(reduced.to_vector<int64_t>() == std::vector<int64_t>(static_cast<size_t>(n), size));
  }
  for (int root = 0; root < size; ++root) {
    Tensor sent = ts::full({2, 3}, rank * 10 + 1);
    staged->broadcast(sent, root);
    CHECK(sent.to_vector<float>() == std::vector<float>(6, root * 10.0f + 1));
  }
  staged->barrier();
}

TEST_CASE("host staging: in-place layouts and views are written back where they belong") {
  auto staged = staged_group();
  if (!staged) return;
  const int size = staged->size();
  const int rank = staged->rank();
  const int64_t n = 3;

  // FSDP's all-gather: the input is this rank's slice of the output.
  Tensor flat = ts::full({size * n + 2}, -7);  // padding on both sides must stay
  Tensor middle = flat.narrow(0, 1, size * n);
  Tensor shard = middle.narrow(0, rank * n, n);
  shard.copy_(ts::full({n}, rank + 0.5));
  staged->all_gather_into(middle, shard);
  std::vector<float> values = flat.to_vector<float>();
  CHECK(values.front() == -7.0f);
  CHECK(values.back() == -7.0f);
  for (int64_t j = 0; j < size * n; ++j) CHECK(values[1 + j] == static_cast<float>(j / n) + 0.5f);

  // A reduce-scatter whose output is the head of its input.
  Tensor buffer = ts::full({size * n}, rank + 1);
  staged->reduce_scatter_into(buffer.narrow(0, 0, n), buffer, ReduceOp::sum);
  CHECK(buffer.narrow(0, 0, n).to_vector<float>() == std::vector<float>(n, size * (size + 1) / 2.0f));

  // bfloat16 reductions still run in float32 on the host.
  Tensor halves = ts::full({4}, rank + 1).to(ts::DType::bf16);
  staged->all_reduce(halves, ReduceOp::avg);
  CHECK(halves.to_vector<float>() == std::vector<float>(4, (size + 1) / 2.0f));
}

TEST_CASE("host staging: asynchronous calls complete with their results, waited in any order") {
  auto staged = staged_group();
  if (!staged) return;
  const int size = staged->size();
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<ts::dist::Work>> pending;
  for (int k = 0; k < 6; ++k) {
    tensors.push_back(ts::full({100}, staged->rank() + k));
    pending.push_back(staged->all_reduce_async(tensors.back(), ReduceOp::sum));
  }
  for (int k = 5; k >= 0; --k) pending[k]->wait();
  for (int k = 0; k < 6; ++k) {
    CHECK(tensors[k].to_vector<float>() == std::vector<float>(100, size * (size - 1) / 2.0f + size * k));
  }
  // Debug mode fingerprints the call as issued (device included) and passes it through.
  auto checked = dist_test::world()->duplicate({.debug_checks = true, .force_host_staging = true});
  Tensor one = ts::ones({5});
  checked->all_reduce(one);
  CHECK(one.to_vector<float>() == std::vector<float>(5, static_cast<float>(size)));
}
