// What the watchdog concludes from the ranks' snapshots (timeouts, deadlocks), checked on
// hand-made snapshots; test_misuse runs the real thing under mpirun.
#include <doctest/doctest.h>

#include "dist_test_support.h"
#include "tessera/dist/rank_progress.h"

using tessera::dist::Answers;
using tessera::dist::GroupProgress;
using tessera::dist::RankProgress;
using test_support::contains;

namespace {

GroupProgress idle(const std::string& group, uint64_t issued) {
  return {.group = group, .issued = issued, .begun = issued, .running = false, .call = "", .running_seconds = 0,
          .members = {}};
}

GroupProgress in(const std::string& group, uint64_t sequence, const std::string& what) {
  return {.group = group,
          .issued = sequence + 1,
          .begun = sequence + 1,
          .running = true,
          .call = tessera::detail::concat("#", sequence, " ", what),
          .running_seconds = 1.5,
          .members = {}};
}

RankProgress rank(std::vector<GroupProgress> groups, bool waiting = true, uint64_t changes = 7) {
  return {.changes = changes, .waiting = waiting, .exiting = false, .groups = std::move(groups)};
}

}  // namespace

TEST_CASE("rank progress survives its wire form, and other text is refused") {
  RankProgress progress = rank({in("world", 4, "all_reduce(sum) float32 x 10"), idle("world.1", 2)}, true, 123);
  progress.exiting = true;
  CHECK(RankProgress::decode(progress.encode()) == progress);
  CHECK(RankProgress::decode(rank({}).encode()) == rank({}));
  CHECK(contains(test_support::error_of([] { RankProgress::decode("hello"); }), "rank progress: unexpected first line"));
  CHECK(contains(test_support::error_of([] { RankProgress::decode("rank\t1\t0\t0\ngroup\tworld\tx\t1\t0\t0\t\t"); }),
                 "expected a number, got 'x'"));
}

TEST_CASE("a timeout names each rank that did not arrive, and why") {
  const std::string call = "#5 all_gather float32 x 8";
  Answers answers{rank({in("world", 5, "all_gather float32 x 8")}),       // the rank asking
                  rank({in("world", 5, "all_gather float32 x 8")}),       // in it: arrived
                  std::nullopt,                                           // silent
                  rank({idle("world", 5)}, false),                        // computing
                  rank({in("world", 5, "all_reduce(sum) float32 x 3")}),  // a different call
                  rank({idle("world", 9)}),                               // already past it
                  rank({in("world", 4, "barrier"), idle("x", 0)})};       // issued it, still in #4
  answers[6]->groups[0].issued = 6;
  std::string message = tessera::dist::timeout_message(answers, 0, "world", 5, call, std::chrono::milliseconds(2500));
  CHECK(contains(message, "collective timeout on group 'world' (seen on rank 0 of 7): #5 all_gather float32 x 8 "
                          "waited more than 2.5 s for the other ranks. Did not arrive: "
                          "rank 2 (it did not answer: stopped, or stuck where Tessera cannot reach it); "
                          "rank 3 (it has issued 5 collectives on group 'world', not yet #5); "
                          "rank 4 (it is in #5 all_reduce(sum) float32 x 3 there); "
                          "rank 6 (it has issued it, but its communication thread has not begun it (it is still in "
                          "#4 barrier))."));
  CHECK_FALSE(contains(message, "rank 1 ("));
  CHECK_FALSE(contains(message, "rank 5 ("));
  CHECK(contains(message, "TESSERA_DIST_TIMEOUT"));

  Answers everyone_in{rank({in("world", 5, "all_gather float32 x 8")}), rank({in("world", 5, "all_gather float32 x 8")})};
  CHECK(contains(tessera::dist::timeout_message(everyone_in, 1, "world", 5, call, std::chrono::seconds(600)),
                 "waited more than 600 s for the other ranks. Every rank has begun it, so the transfer itself is stuck"));
}

TEST_CASE("a deadlock: every rank waits and no call in flight can complete") {
  // Groups waited on in different orders.
  Answers crossed{rank({idle("world", 2), in("world.1", 0, "barrier")}), rank({in("world", 2, "barrier")})};
  std::string message = tessera::dist::deadlock_message(crossed, 1);
  CHECK(contains(message, "collectives that can never complete (seen on rank 1 of 2): every rank waits"));
  CHECK(contains(message, "rank 0 is in #0 barrier on group 'world.1', waiting for rank 1 (it has issued 0 collectives "
                          "on group 'world.1', not yet #0; it is in #2 barrier on group 'world')"));
  CHECK(contains(message, "rank 1 is in #2 barrier on group 'world', waiting for rank 0 (it has issued 2 collectives "
                          "on group 'world', not yet #2; it is in #0 barrier on group 'world.1')"));

  // Mismatched calls on one group.
  Answers mismatched{rank({in("world", 0, "all_gather float32 x 1024")}), rank({in("world", 0, "all_reduce(sum) float32 x 10")})};
  CHECK(contains(tessera::dist::deadlock_message(mismatched, 0),
                 "rank 0 is in #0 all_gather float32 x 1024 on group 'world', waiting for rank 1 (it is in #0 "
                 "all_reduce(sum) float32 x 10 there)"));

  // Not deadlocks: a rank computing, a rank silent, a rank exiting, a call that can complete.
  Answers computing = crossed;
  computing[1]->waiting = false;
  CHECK(tessera::dist::deadlock_message(computing, 0).empty());
  Answers silent = crossed;
  silent[1].reset();
  CHECK(tessera::dist::deadlock_message(silent, 0).empty());
  Answers exiting = crossed;
  exiting[1]->exiting = true;
  CHECK(tessera::dist::deadlock_message(exiting, 0).empty());
  Answers completing{rank({in("world", 3, "barrier")}), rank({in("world", 3, "barrier")})};
  CHECK(tessera::dist::deadlock_message(completing, 0).empty());
  Answers one_done{rank({in("world", 3, "barrier")}), rank({idle("world", 4), in("world.1", 0, "barrier")})};
  CHECK(tessera::dist::deadlock_message(one_done, 0).empty());  // rank 1 left #3: rank 0 will too
}

TEST_CASE("groups of some ranks: only their members hold their calls back") {
  // A 4-rank world split in two shard groups ({0, 1} and {2, 3}, as a DeviceMesh makes):
  // each pair waits in its own group's barrier, which completes. No deadlock.
  auto of = [](GroupProgress progress, std::vector<int> members) {
    progress.members = std::move(members);
    return progress;
  };
  const GroupProgress first = of(in("world.split0.0", 0, "barrier"), {0, 1});
  const GroupProgress second = of(in("world.split0.1", 0, "barrier"), {2, 3});
  Answers pairs{rank({idle("world", 1), first}), rank({idle("world", 1), first}), rank({idle("world", 1), second}),
                rank({idle("world", 1), second})};
  CHECK(tessera::dist::deadlock_message(pairs, 0).empty());
  RankProgress with_members = *pairs[2];
  CHECK(RankProgress::decode(with_members.encode()) == with_members);

  // Rank 1 computes past the timeout: it alone did not arrive; ranks 2 and 3 are no members.
  Answers late = pairs;
  late[1] = rank({idle("world", 1), of(idle("world.split0.0", 0), {0, 1})}, false);
  std::string message =
      tessera::dist::timeout_message(late, 0, "world.split0.0", 0, "#0 barrier", std::chrono::milliseconds(1000));
  CHECK(contains(message, "Did not arrive: rank 1 (it has issued 0 collectives on group 'world.split0.0', not yet #0)."));
  CHECK_FALSE(contains(message, "rank 2 ("));
  CHECK_FALSE(contains(message, "rank 3 ("));
}
