// What one rank tells the others about its collectives when one of them stalls, and what
// the watchdog concludes from every rank's answer (watchdog.h).
//
// A collective can complete only once every rank of its group has begun the same call:
// a rank that has not issued it yet (it is computing, stopped, or waiting elsewhere), or
// whose communication thread is in a different call at that place (a mismatch), holds
// it back. From the answers the watchdog names those ranks when a call times out, and
// sees a deadlock when every rank waits and no call in flight anywhere can complete:
// calls of different groups waited on in different orders, or mismatched calls on one
// group, which otherwise hang without debug mode's fingerprints.
//
// Pure logic on snapshots (no MPI), so the messages are tested without a job.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::dist {

// One group's collectives on one rank.
struct GroupProgress {
  std::string group;       // "world", "world.1", ...
  uint64_t issued = 0;     // collectives the program issued on the group
  uint64_t begun = 0;      // of those, begun by the group's communication thread
  bool running = false;    // the thread is inside collective #(begun - 1) now
  std::string call;        // that collective, "#5 all_reduce(sum) float32 x 10", while running
  double running_seconds = 0;
  std::vector<int> members;  // the group's world ranks, ascending; empty: every rank

  bool operator==(const GroupProgress&) const = default;
};

struct RankProgress {
  uint64_t changes = 0;    // counts every change of the fields below: equal in two
                           // snapshots means nothing moved on this rank in between
  bool waiting = false;    // every thread that issued collectives is waiting on one now
  bool exiting = false;    // returned from main (the exit watch handles that case)
  std::vector<GroupProgress> groups;

  const GroupProgress* find(std::string_view group) const;
  // Lines of tab-separated fields; group names and call descriptions hold neither.
  std::string encode() const;
  // ValueError for text encode() did not write.
  static RankProgress decode(std::string_view text);

  bool operator==(const RankProgress&) const = default;
};

// Every rank's answer, indexed by rank; nullopt: the rank did not answer in time.
using Answers = std::vector<std::optional<RankProgress>>;

// Why `rank` holds back collective #`sequence` on `group` (described as `call` on the
// rank asking), "it has issued 2 collectives on group 'world', not yet #2"; nullopt when
// it does not: it has begun the same call or is past it. Only members of the group (as the
// rank asking records them) can hold its calls back.
std::optional<std::string> holdup(const Answers& answers, int rank, std::string_view group, uint64_t sequence,
                                  std::string_view call);
// Every other rank that holds it back, with the reason: "rank 1 (it did not answer: ...);
// rank 3 (it is in #2 all_gather float32 x 8 there)"; empty when none does.
std::string holdups(const Answers& answers, int asking, std::string_view group, uint64_t sequence,
                    std::string_view call);

// The message of a collective that waited longer than `timeout` on rank `seen_on`: the
// call, its sequence number, and each rank that did not arrive with the reason.
std::string timeout_message(const Answers& answers, int seen_on, std::string_view group, uint64_t sequence,
                            std::string_view call, std::chrono::milliseconds timeout);

// Non-empty when the answers show a deadlock: every rank answered, every rank waits and
// is not exiting, and no call in flight on any rank can complete. The message lists each
// rank's calls in flight and what holds each back.
std::string deadlock_message(const Answers& answers, int seen_on);

}  // namespace tessera::dist
