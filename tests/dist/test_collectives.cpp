// Every collective on the world group, with values that identify the rank they came from,
// for float32, float64 and int64 (uint8 and bfloat16 where they apply), at sizes 0, 1, odd
// and large. Expected values are small integers or halves, exact in every dtype used, so
// comparisons are exact.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <type_traits>
#include <vector>

#include "dist_test_support.h"

namespace ts = tessera;
using ts::dist::ReduceOp;

namespace {

const std::vector<int64_t> kSizes = {0, 1, 7, 1001};

// A 1-D tensor whose element i is value(i).
template <class T, class Value>
ts::Tensor make(int64_t count, Value value) {
  ts::Tensor tensor = ts::empty({count}, {.dtype = ts::dtype_of<T>});
  T* data = tensor.data_ptr<T>();
  for (int64_t i = 0; i < count; ++i) data[i] = static_cast<T>(value(i));
  return tensor;
}

template <class T, class Value>
std::vector<T> expected(int64_t count, Value value) {
  std::vector<T> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) values[i] = static_cast<T>(value(i));
  return values;
}

}  // namespace

TEST_CASE_TEMPLATE("all_gather_into puts rank r's input at [r*n, (r+1)*n) of the output", T, float, double, int64_t) {
  ts::dist::ProcessGroup& world = *dist_test::world();
  const int size = world.size();
  const int rank = world.rank();
  for (int64_t n : kSizes) {
    INFO("rank ", rank, " of ", size, ", n = ", n);
    ts::Tensor input = make<T>(n, [&](int64_t i) { return rank * 10000 + i; });
    ts::Tensor output = ts::full({size, n}, -1, {.dtype = ts::dtype_of<T>});  // any shape of size * n elements
    world.all_gather_into(output, input);
    const int64_t width = std::max<int64_t>(n, 1);  // no division by zero at n = 0 (no elements either)
    CHECK(output.to_vector<T>() == expected<T>(size * n, [&](int64_t j) { return (j / width) * 10000 + j % width; }));
    CHECK(input.to_vector<T>() == expected<T>(n, [&](int64_t i) { return rank * 10000 + i; }));
  }
}

TEST_CASE("all_gather_into accepts the input as its own slice of the output (in place)") {
  ts::dist::ProcessGroup& world = *dist_test::world();
  const int64_t n = 5;
  ts::Tensor flat = ts::full({world.size() * n}, -1);
  ts::Tensor shard = flat.narrow(0, world.rank() * n, n);  // FSDP's layout: the shard is a view of the flat buffer
  shard.copy_(make<float>(n, [&](int64_t i) { return world.rank() * 100 + i; }));
  world.all_gather_into(flat, shard);
  CHECK(flat.to_vector<float>() == expected<float>(world.size() * n, [&](int64_t j) { return (j / n) * 100 + j % n; }));

  // An input overlapping the output elsewhere is staged, not corrupted.
  ts::Tensor other = ts::full({world.size() * n}, -1);
  ts::Tensor head = other.narrow(0, 0, n);
  head.copy_(make<float>(n, [&](int64_t i) { return world.rank() * 100 + i; }));
  world.all_gather_into(other, head);
  CHECK(other.to_vector<float>() == expected<float>(world.size() * n, [&](int64_t j) { return (j / n) * 100 + j % n; }));
}

TEST_CASE_TEMPLATE("reduce_scatter_into sums or averages, then gives rank r elements [r*n, (r+1)*n)", T, float, double,
                   int64_t) {
  ts::dist::ProcessGroup& world = *dist_test::world();
  const int size = world.size();
  const int rank = world.rank();
  for (int64_t n : kSizes) {
    INFO("rank ", rank, " of ", size, ", n = ", n);
    // Rank r contributes (r + 1) * (j + 1): the sum over ranks is (j + 1) * size * (size + 1) / 2.
    ts::Tensor input = make<T>(size * n, [&](int64_t j) { return (rank + 1) * (j + 1); });
    ts::Tensor output = ts::full({n}, -1, {.dtype = ts::dtype_of<T>});
    world.reduce_scatter_into(output, input, ReduceOp::sum);
    CHECK(output.to_vector<T>() == expected<T>(n, [&](int64_t i) { return (rank * n + i + 1) * size * (size + 1) / 2; }));

    ts::Tensor largest = ts::full({n}, -1, {.dtype = ts::dtype_of<T>});
    world.reduce_scatter_into(largest, input, ReduceOp::max);
    CHECK(largest.to_vector<T>() == expected<T>(n, [&](int64_t i) { return (rank * n + i + 1) * size; }));

    if constexpr (std::is_floating_point_v<T>) {
      ts::Tensor mean = ts::full({n}, -1, {.dtype = ts::dtype_of<T>});
      world.reduce_scatter_into(mean, input, ReduceOp::avg);
      // (j + 1) * (size + 1) / 2: a multiple of 1/2, exact.
      CHECK(mean.to_vector<T>() == expected<T>(n, [&](int64_t i) { return (rank * n + i + 1) * (size + 1) / T(2); }));
    }
  }
}

TEST_CASE("reduce_scatter_into with the output inside the input (in place and overlapping)") {
  ts::dist::ProcessGroup& world = *dist_test::world();
  const int size = world.size();
  const int rank = world.rank();
  const int64_t n = 3;
  auto contribution = [&](int64_t j) { return (rank + 1) * (j + 1); };
  auto sum_at = [&](int64_t i) { return (rank * n + i + 1) * size * (size + 1) / 2; };

  ts::Tensor buffer = make<float>(size * n, contribution);
  world.reduce_scatter_into(buffer.narrow(0, 0, n), buffer, ReduceOp::sum);  // MPI_IN_PLACE
  CHECK(buffer.narrow(0, 0, n).to_vector<float>() == expected<float>(n, sum_at));

  ts::Tensor other = make<float>(size * n, contribution);
  world.reduce_scatter_into(other.narrow(0, (size - 1) * n, n), other, ReduceOp::sum);  // staged copy
  CHECK(other.narrow(0, (size - 1) * n, n).to_vector<float>() == expected<float>(n, sum_at));
}

TEST_CASE_TEMPLATE("all_reduce sums, averages and takes the maximum in place", T, float, double, int64_t) {
  ts::dist::ProcessGroup& world = *dist_test::world();
  const int size = world.size();
  const int rank = world.rank();
  for (int64_t n : kSizes) {
    INFO("rank ", rank, " of ", size, ", n = ", n);
    ts::Tensor summed = make<T>(n, [&](int64_t i) { return (rank + 1) * (i + 1); });
    world.all_reduce(summed, ReduceOp::sum);
    CHECK(summed.to_vector<T>() == expected<T>(n, [&](int64_t i) { return (i + 1) * size * (size + 1) / 2; }));

    // Rank i % size holds 100 + i, the others i: the maximum is 100 + i wherever it lives.
    ts::Tensor largest = make<T>(n, [&](int64_t i) { return i % size == rank ? 100 + i : i; });
    world.all_reduce(largest, ReduceOp::max);
    CHECK(largest.to_vector<T>() == expected<T>(n, [&](int64_t i) { return 100 + i; }));

    if constexpr (std::is_floating_point_v<T>) {
      ts::Tensor mean = make<T>(n, [&](int64_t i) { return (rank + 1) * (i + 1); });
      world.all_reduce(mean, ReduceOp::avg);
      CHECK(mean.to_vector<T>() == expected<T>(n, [&](int64_t i) { return (i + 1) * (size + 1) / T(2); }));
    }
  }
  // A 2-D tensor is reduced element by element like its flat form.
  ts::Tensor matrix = ts::full({2, 3}, rank + 1, {.dtype = ts::dtype_of<T>});
  world.all_reduce(matrix);
  CHECK(matrix.sizes() == ts::Shape{2, 3});
  CHECK(matrix.to_vector<T>() == std::vector<T>(6, static_cast<T>(size * (size + 1) / 2)));
}

TEST_CASE_TEMPLATE("broadcast copies the root's tensor to every rank, from every root", T, float, double, int64_t) {
  ts::dist::ProcessGroup& world = *dist_test::world();
  const int rank = world.rank();
  for (int root = 0; root < world.size(); ++root) {
    for (int64_t n : kSizes) {
      INFO("rank ", rank, ", root ", root, ", n = ", n);
      ts::Tensor tensor = make<T>(n, [&](int64_t i) { return rank * 10000 + i; });
      world.broadcast(tensor, root);
      CHECK(tensor.to_vector<T>() == expected<T>(n, [&](int64_t i) { return root * 10000 + i; }));
    }
  }
}

TEST_CASE("uint8 and bfloat16: gathers move the bytes, bfloat16 reductions run in float32") {
  ts::dist::ProcessGroup& world = *dist_test::world();
  const int size = world.size();
  const int rank = world.rank();

  ts::Tensor bytes = ts::full({3}, rank + 1, {.dtype = ts::DType::u8});
  ts::Tensor gathered = ts::zeros({size * 3}, {.dtype = ts::DType::u8});
  world.all_gather_into(gathered, bytes);
  CHECK(gathered.to_vector<int64_t>() == expected<int64_t>(size * 3, [](int64_t j) { return j / 3 + 1; }));
  world.all_reduce(bytes, ReduceOp::max);
  CHECK(bytes.to_vector<int64_t>() == std::vector<int64_t>(3, size));

  // bfloat16 values here are small integers and halves: exact.
  ts::Tensor halves = ts::full({5}, rank + 0.5).to(ts::DType::bf16);
  ts::Tensor all_halves = ts::zeros({size * 5}).to(ts::DType::bf16);
  world.all_gather_into(all_halves, halves);
  CHECK(all_halves.to_vector<float>() == expected<float>(size * 5, [](int64_t j) { return j / 5 + 0.5f; }));

  ts::Tensor summed = ts::full({4}, rank + 1).to(ts::DType::bf16);
  world.all_reduce(summed, ReduceOp::sum);
  CHECK(summed.to_vector<float>() == std::vector<float>(4, size * (size + 1) / 2.0f));
  ts::Tensor mean = ts::full({4}, rank + 1).to(ts::DType::bf16);
  world.all_reduce(mean, ReduceOp::avg);
  CHECK(mean.to_vector<float>() == std::vector<float>(4, (size + 1) / 2.0f));

  ts::Tensor input = ts::full({size * 2}, rank + 1).to(ts::DType::bf16);
  ts::Tensor output = ts::zeros({2}).to(ts::DType::bf16);
  world.reduce_scatter_into(output, input, ReduceOp::avg);
  CHECK(output.to_vector<float>() == std::vector<float>(2, (size + 1) / 2.0f));

  ts::Tensor sent = ts::full({3}, rank == 0 ? 2.5 : -1.0).to(ts::DType::bf16);
  world.broadcast(sent, 0);
  CHECK(sent.to_vector<float>() == std::vector<float>(3, 2.5f));
}

TEST_CASE("bool: gathers and broadcasts move masks; reductions refuse them") {
  ts::dist::ProcessGroup& world = *dist_test::world();
  const int size = world.size();
  const int rank = world.rank();
  ts::Tensor mask = ts::tensor<bool>({rank % 2 == 0, true});
  ts::Tensor gathered = ts::zeros({size * 2}, {.dtype = ts::DType::boolean});
  world.all_gather_into(gathered, mask);
  CHECK(gathered.to_vector<int64_t>() == expected<int64_t>(size * 2, [](int64_t j) { return j % 2 == 1 || (j / 2) % 2 == 0; }));
  ts::Tensor sent = ts::full({3}, rank == 0 ? 1.0 : 0.0, {.dtype = ts::DType::boolean});
  world.broadcast(sent, 0);
  CHECK(sent.to_vector<bool>() == std::vector<bool>(3, true));
  std::string refused = test_support::error_of([&] { world.all_reduce(mask); });
  CHECK(test_support::contains(refused, "reductions are not defined on bool tensors"));
}

TEST_CASE("barrier: every rank's write before it is visible to every rank after it") {
  ts::dist::ProcessGroup& world = *dist_test::world();
  // One folder for the job, named by a number rank 0 draws and broadcasts.
  ts::Tensor nonce = ts::full({1}, 0, {.dtype = ts::DType::i64});
  if (world.rank() == 0) nonce.fill_(static_cast<double>(std::random_device{}() & 0xffffff));
  world.broadcast(nonce, 0);
  namespace fs = std::filesystem;
  fs::path folder = fs::temp_directory_path() / ("tessera_barrier_" + std::to_string(nonce.item<int64_t>()));
  fs::create_directories(folder);
  std::ofstream(folder / ("rank" + std::to_string(world.rank()))) << world.rank();

  uint64_t before = world.next_sequence();
  world.barrier();
  CHECK(world.next_sequence() == before + 1);
  int seen = 0;
  for (int rank = 0; rank < world.size(); ++rank) seen += fs::exists(folder / ("rank" + std::to_string(rank)));
  CHECK(seen == world.size());

  world.barrier_async()->wait();  // nobody removes the folder while another rank still looks
  if (world.rank() == 0) fs::remove_all(folder);
}

TEST_CASE("views: a narrowed slice of a larger buffer is gathered into and reduced in place") {
  ts::dist::ProcessGroup& world = *dist_test::world();
  const int size = world.size();
  // A padded buffer whose middle is the output: the padding must stay untouched.
  ts::Tensor buffer = ts::full({size * 2 + 2}, -7);
  ts::Tensor middle = buffer.narrow(0, 1, size * 2);
  world.all_gather_into(middle, ts::full({2}, world.rank()));
  std::vector<float> values = buffer.to_vector<float>();
  CHECK(values.front() == -7.0f);
  CHECK(values.back() == -7.0f);
  for (int64_t j = 0; j < size * 2; ++j) CHECK(values[1 + j] == static_cast<float>(j / 2));

  world.all_reduce(buffer.narrow(0, 0, 1));
  CHECK(buffer.to_vector<float>().front() == -7.0f * size);
}

TEST_CASE("the example in process_group.h") {
  std::shared_ptr<ts::dist::ProcessGroup> world = dist_test::world();
  ts::Tensor shard = ts::full({4}, world->rank());
  ts::Tensor full = ts::empty({4 * world->size()});
  world->all_gather_into(full, shard);
  ts::Tensor grad = ts::full({10}, world->rank());
  auto pending = world->all_reduce_async(grad, ts::dist::ReduceOp::avg);
  pending->wait();

  std::vector<float> gathered = full.to_vector<float>();
  for (int64_t j = 0; j < 4 * world->size(); ++j) CHECK(gathered[j] == static_cast<float>(j / 4));
  CHECK(grad.to_vector<float>() == std::vector<float>(10, (world->size() - 1) / 2.0f));
}
