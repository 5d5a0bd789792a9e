// Asynchronous collectives: several in flight at once, waited in order and out of order,
// mixed with blocking calls, and on a duplicated group running beside the world.
#include <doctest/doctest.h>

#include <vector>

#include "dist_test_support.h"

namespace ts = tessera;
using ts::dist::ReduceOp;

TEST_CASE("several asynchronous collectives in flight, waited in issue order and in reverse") {
  ts::dist::ProcessGroup& world = *dist_test::world();
  const int size = world.size();
  const int rank = world.rank();
  const float rank_sum = size * (size + 1) / 2.0f;

  for (bool reverse : {false, true}) {
    INFO("rank ", rank, (reverse ? ", waiting in reverse" : ", waiting in order"));
    std::vector<ts::Tensor> reduced;
    std::vector<std::shared_ptr<ts::dist::Work>> pending;
    for (int k = 0; k < 6; ++k) {
      reduced.push_back(ts::full({100 + k}, (rank + 1) * (k + 1)));
      pending.push_back(world.all_reduce_async(reduced.back()));
    }
    ts::Tensor shard = ts::full({3}, rank);
    ts::Tensor gathered = ts::full({size * 3}, -1);
    pending.push_back(world.all_gather_into_async(gathered, shard));
    ts::Tensor sent = ts::full({4}, rank == size - 1 ? 42.0 : 0.0);
    pending.push_back(world.broadcast_async(sent, size - 1));
    ts::Tensor scattered = ts::full({2}, -1);
    pending.push_back(world.reduce_scatter_into_async(scattered, ts::full({size * 2}, rank + 1), ReduceOp::avg));
    pending.push_back(world.barrier_async());

    if (reverse) {
      for (auto it = pending.rbegin(); it != pending.rend(); ++it) (*it)->wait();
    } else {
      for (auto& work : pending) work->wait();
    }
    for (auto& work : pending) CHECK(work->is_completed());
    for (int k = 0; k < 6; ++k) {
      CHECK(reduced[k].to_vector<float>() == std::vector<float>(100 + k, rank_sum * (k + 1)));
    }
    std::vector<float> gathered_values = gathered.to_vector<float>();
    for (int64_t j = 0; j < size * 3; ++j) CHECK(gathered_values[j] == static_cast<float>(j / 3));
    CHECK(sent.to_vector<float>() == std::vector<float>(4, 42.0f));
    CHECK(scattered.to_vector<float>() == std::vector<float>(2, (size + 1) / 2.0f));
  }
}

TEST_CASE("blocking calls run after the asynchronous calls issued before them") {
  ts::dist::ProcessGroup& world = *dist_test::world();
  const int size = world.size();
  ts::Tensor first = ts::full({1000}, world.rank() + 1);
  auto pending = world.all_reduce_async(first);
  // Issued later, so it runs later on every rank, although it is waited for first.
  ts::Tensor second = ts::full({1}, 1);
  world.all_reduce(second);
  CHECK(second.item<float>() == static_cast<float>(size));
  pending->wait();
  CHECK(first.to_vector<float>() == std::vector<float>(1000, size * (size + 1) / 2.0f));
}

TEST_CASE("a Work describes its call, and waiting twice is harmless") {
  ts::dist::ProcessGroup& world = *dist_test::world();
  uint64_t sequence = world.next_sequence();
  ts::Tensor tensor = ts::ones({10});
  auto work = world.all_reduce_async(tensor, ReduceOp::avg);
  std::string expected = ts::detail::concat('#', sequence, " all_reduce(avg) float32 x 10 on group 'world'");
  CHECK(work->description() == expected);
  work->wait();
  work->wait();
  CHECK(work->is_completed());
  CHECK(tensor.to_vector<float>() == std::vector<float>(10, 1.0f));
}

TEST_CASE("the input stays alive while its collective runs, even when the caller drops it") {
  ts::dist::ProcessGroup& world = *dist_test::world();
  ts::Tensor output = ts::full({world.size() * 50}, -1);
  std::shared_ptr<ts::dist::Work> work;
  {
    ts::Tensor temporary = ts::full({50}, world.rank());
    work = world.all_gather_into_async(output, temporary);
  }
  work->wait();
  std::vector<float> values = output.to_vector<float>();
  for (int64_t j = 0; j < world.size() * 50; ++j) CHECK(values[j] == static_cast<float>(j / 50));
}

TEST_CASE("a duplicated group has its own sequence and runs beside the world") {
  std::shared_ptr<ts::dist::ProcessGroup> world = dist_test::world();
  std::shared_ptr<ts::dist::ProcessGroup> side = world->duplicate();
  CHECK(side->rank() == world->rank());
  CHECK(side->size() == world->size());
  CHECK(side->backend() == world->backend());
  CHECK(side->name().rfind("world.", 0) == 0);
  CHECK(side->next_sequence() == 0);
  CHECK(side->debug_checks() == world->debug_checks());

  const int size = world->size();
  ts::Tensor on_world = ts::full({5000}, world->rank() + 1);
  ts::Tensor on_side = ts::full({size * 7}, world->rank() + 1);
  ts::Tensor side_output = ts::full({7}, -1);
  auto world_work = world->all_reduce_async(on_world);
  auto side_work = side->reduce_scatter_into_async(side_output, on_side, ReduceOp::sum);
  side_work->wait();
  world_work->wait();
  CHECK(on_world.to_vector<float>() == std::vector<float>(5000, size * (size + 1) / 2.0f));
  CHECK(side_output.to_vector<float>() == std::vector<float>(7, size * (size + 1) / 2.0f));
}
