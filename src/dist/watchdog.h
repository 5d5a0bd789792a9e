// CollectiveWatchdog: turns a collective that can never complete, or that waits past the
// group's timeout, from a silent hang into a job abort with a message naming the call and
// the ranks that hold it back.
//
// A blocking MPI collective cannot be cancelled, so a stalled call is diagnosed from
// outside: each rank's watchdog thread knows what this rank's groups have issued and begun
// (the communication threads report it) and which of its issuing threads are waiting.
// When a call has run for a second, or past its group's timeout, the watchdog asks every
// other rank for that snapshot over a control channel of its own (control_channel.h;
// rank_progress.h says what is concluded from the answers):
//   - past the timeout: the ranks that did not arrive are named (a rank that does not
//     answer within two seconds is stopped or stuck beyond reach);
//   - before it: if every rank waits and no call in flight anywhere can complete (groups
//     waited on in different orders, mismatched calls on one group), twice in a row with
//     nothing changed on any rank in between, it is a deadlock.
// Either way the rank prints the message, sends it to every other rank (each prints it
// too), waits up to a second for them, and calls MPI_Abort: the communication threads are
// inside MPI calls that will never return, so the job cannot go on (PyTorch's NCCL
// watchdog tears the process down for the same reason).
//
// The polling costs an MPI_Iprobe every 10 ms; nothing is exchanged while collectives
// complete within a second. Runs with the exit watch: when Tessera started MPI itself, with
// MPI_THREAD_MULTIPLE and more than one rank. Internal.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "tessera/dist/control_channel.h"
#include "tessera/dist/rank_progress.h"

namespace tessera::dist {

class CollectiveWatchdog {
 public:
  // Opens the control channel and starts the watchdog thread (throws DistError when MPI fails).
  CollectiveWatchdog();
  // Stops the watchdog thread; before MPI_Finalize.
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // On the issuing thread, as collective `sequence` of `group` is numbered.
  void issued(const std::string& group, uint64_t sequence);
  // On the group's communication thread, around one collective's MPI calls. Once the
  // watchdog is aborting the job, ends() and issued() never return: a call that completes
  // late (a stopped rank continued by mpirun's teardown) must not let the program go on.
  void begins(const std::string& group, std::string call, std::chrono::milliseconds timeout);
  void ends(const std::string& group);
  // Around a thread's wait on a collective's Work.
  void wait_begins();
  void wait_ends();
  // The rank returned from main (its exit handshake runs next).
  void exiting();
  // `group` spans only these world ranks (a split of the world; unknown groups span all):
  // other ranks never hold its calls back. As ExitWatch::set_members.
  void set_members(const std::string& group, std::vector<int> world_ranks);

 private:
  struct Group {
    GroupProgress progress;
    std::chrono::steady_clock::time_point since;  // of the running call
    std::chrono::milliseconds timeout{0};
  };
  enum class Purpose { timeout, deadlock };
  struct Inquiry {
    Purpose purpose = Purpose::deadlock;
    uint64_t id = 0;
    int round = 1;
    std::chrono::steady_clock::time_point started{};
    Answers answers{};
    Answers previous{};  // the deadlock check's first round
    std::string group{};
    std::string call{};
    uint64_t sequence = 0;
    std::chrono::milliseconds timeout{0};
  };
  void watch();
  void receive_messages();
  void handle(int source, int tag, std::string text);
  void check_running_calls();
  void start_inquiry(Inquiry inquiry);
  void conclude_inquiry();
  [[noreturn]] void abort_job(const std::string& message);
  // The channel's calls, never throwing: the watchdog must reach its MPI_Abort whatever
  // MPI says, so a failed receive is a message not (yet) arrived, a failed send one lost.
  std::optional<ControlChannel::Message> receive(int tag = MPI_ANY_TAG);
  void send(int destination, int tag, std::string text);
  RankProgress snapshot();
  void hold_if_aborting() const;
  void changed() { ++changes_; }  // with mutex_ held

  ControlChannel channel_;
  const int rank_ = channel_.rank();
  const int size_ = channel_.size();

  std::mutex mutex_;  // guards the fields below, up to the thread's own
  std::map<std::string, Group> groups_;
  std::map<std::thread::id, int> issuers_;  // threads that issued collectives -> how many waits they are in
  uint64_t changes_ = 0;
  bool exiting_ = false;

  // The watchdog thread's own.
  std::optional<Inquiry> inquiry_;
  uint64_t next_inquiry_ = 1;
  std::chrono::steady_clock::time_point last_deadlock_check_{};
  std::optional<std::chrono::steady_clock::time_point> abort_at_;  // another rank reported a failure

  std::atomic<bool> stopping_{false};
  std::atomic<bool> aborting_{false};
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace tessera::dist
