// split() and DeviceMesh at every world size the suite runs (1 to 4 ranks): which ranks
// each group holds, in which order, that collectives stay within them, and the errors.
#include <doctest/doctest.h>

#include <numeric>

#include "dist_test_support.h"
#include "test_support.h"

namespace ts = tessera;
using dist_test::error_of;
using test_support::contains;

namespace {

// The sum of the world ranks of the group's members, by an all-reduce in the group.
int64_t sum_of_world_ranks(ts::dist::ProcessGroup& group) {
  ts::Tensor value = ts::full({1}, dist_test::world()->rank(), {.dtype = ts::DType::i64});
  group.all_reduce(value);
  return value.item<int64_t>();
}

// The shapes {replicas, shard size} whose product is `ranks`.
std::vector<std::array<int, 2>> factorisations(int ranks) {
  std::vector<std::array<int, 2>> shapes;
  for (int replicas = 1; replicas <= ranks; ++replicas) {
    if (ranks % replicas == 0) shapes.push_back({replicas, ranks / replicas});
  }
  return shapes;
}

}  // namespace

TEST_CASE("split: ranks of one color form a group, ranked in their world order") {
  auto world = dist_test::world();
  const int rank = world->rank(), size = world->size();
  const uint64_t before = world->next_sequence();
  auto parity = world->split(rank % 2);
  CHECK(world->next_sequence() == before + 1);  // one call in the world's sequence
  const int members = (size - rank % 2 + 1) / 2;  // ranks of my parity
  CHECK(parity->size() == members);
  CHECK(parity->rank() == rank / 2);
  CHECK(parity->backend() == world->backend());
  CHECK(parity->name() == world->name() + ".split1." + std::to_string(rank % 2));
  int64_t expected = 0;
  for (int r = rank % 2; r < size; r += 2) expected += r;
  CHECK(sum_of_world_ranks(*parity) == expected);
  auto named = world->split(0, "everyone");
  CHECK(named->name() == "everyone");
  CHECK(named->size() == size);
  CHECK(contains(error_of([&] { world->split(-1); }), "the color must be non-negative, got -1"));
  CHECK(world->next_sequence() == before + 2);  // the refused call left no trace
}

TEST_CASE("DeviceMesh: every factorisation of the world, rows are shard groups and columns replica groups") {
  auto world = dist_test::world();
  const int rank = world->rank();
  for (std::array<int, 2> shape : factorisations(world->size())) {
    CAPTURE(shape[0]);
    CAPTURE(shape[1]);
    const uint64_t sequence_before = world->next_sequence();
    auto mesh = ts::dist::init_device_mesh(world, shape);
    const int replica = rank / shape[1], index = rank % shape[1];
    CHECK(mesh->replicas() == shape[0]);
    CHECK(mesh->shard_size() == shape[1]);
    CHECK(mesh->replica_index() == replica);
    CHECK(mesh->shard_index() == index);
    CHECK(mesh->shard_group()->size() == shape[1]);
    CHECK(mesh->shard_group()->rank() == index);
    CHECK(mesh->replicate_group()->size() == shape[0]);
    CHECK(mesh->replicate_group()->rank() == replica);
    CHECK(mesh->group(0) == mesh->replicate_group());
    CHECK(mesh->group("shard") == mesh->shard_group());
    const std::string base = world->name() + ".mesh" + std::to_string(sequence_before);
    CHECK(mesh->shard_group()->name() == base + ".shard." + std::to_string(replica));
    CHECK(mesh->replicate_group()->name() == base + ".replicate." + std::to_string(index));
    // Row `replica` holds world ranks replica*S .. replica*S + S-1; column `index` holds index, index+S, ...
    int64_t row = 0, column = 0;
    for (int i = 0; i < shape[1]; ++i) row += replica * shape[1] + i;
    for (int r = 0; r < shape[0]; ++r) column += r * shape[1] + index;
    CHECK(sum_of_world_ranks(*mesh->shard_group()) == row);
    CHECK(sum_of_world_ranks(*mesh->replicate_group()) == column);
    CHECK(contains(mesh->str(), std::to_string(shape[0]) + " x " + std::to_string(shape[1])));
  }
}

TEST_CASE("DeviceMesh: a shape that does not fit the world, and dims out of range, are clear errors") {
  auto world = dist_test::world();
  const int size = world->size();
  CHECK(contains(error_of([&] { ts::dist::init_device_mesh(world, {2, size}); }),
                 "a mesh of 2 replicas x " + std::to_string(size) + " ranks per shard group needs " +
                     std::to_string(2 * size) + " ranks, but group '" + world->name() + "' has " + std::to_string(size)));
  CHECK(contains(error_of([&] { ts::dist::init_device_mesh(world, {0, size}); }), "must be positive"));
  auto mesh = ts::dist::init_device_mesh(world, {1, size});
  CHECK(contains(error_of([&] { mesh->group(2); }), "dim 2 is out of range"));
  CHECK(contains(error_of([&] { mesh->group("tensor"); }), "no dim named 'tensor'"));
}
