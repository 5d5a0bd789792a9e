// ExitWatch: turns "a rank returned from main while the others wait in a collective" from
// a silent hang into a prompt job abort.
//
// mpirun ends the job when a rank dies (a signal, _exit, or exit without MPI_Finalize),
// but a rank that returns normally calls MPI_Finalize, which waits for the other ranks,
// while they wait in a collective it will never issue: both wait forever. So, before MPI
// is finalized, each rank tells every other rank how many collectives it issued on each
// group (groups are named alike on every rank: "world", "world.1", ...), over a control
// channel of its own (control_channel.h), and then waits for the same notice from every
// other rank. A watcher thread on each rank polls for notices every few milliseconds. On
// a notice it compares counts:
//   - this rank issued more collectives on a group than the exited rank did: the extra one
//     can never complete and this rank is (or will be) stuck in it, unreachable by an
//     exception, so the watcher prints both counts and calls MPI_Abort;
//   - otherwise it remembers the count, and a later collective beyond it is refused at
//     issue with a DistError instead of hanging.
// A group of only some ranks (split(), DeviceMesh) is compared only against its members'
// notices: the others never issue on it. The watch runs only when Tessera started MPI itself, with MPI_THREAD_MULTIPLE, and with
// more than one rank. Internal.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/dist/control_channel.h"

namespace tessera::dist {

class ExitWatch {
 public:
  // Opens the control channel and starts the watcher (throws DistError when MPI fails).
  ExitWatch();
  // Waits for the watcher: once every other rank's notice is in.
  ~ExitWatch();
  ExitWatch(const ExitWatch&) = delete;
  ExitWatch& operator=(const ExitWatch&) = delete;

  // Before this rank issues collective `sequence` on `group` ("#5 all_reduce ..." in
  // `call`): refuses it with DistError when a rank has exited after fewer collectives.
  void before_issue(const std::string& group, uint64_t sequence, const std::string& call);
  // At exit: sends this rank's counts to every other rank, then waits until every other
  // rank has sent its own (or the job is aborted). Called once, before MPI_Finalize.
  void announce_exit_and_wait();
  // `group` holds only `world_ranks` (split groups); groups never named here hold every rank.
  void set_members(const std::string& group, std::vector<int> world_ranks);

 private:
  void watch();
  void receive_notice(int source, const std::string& text);

  ControlChannel channel_;
  const int rank_ = channel_.rank();
  const int size_ = channel_.size();
  std::mutex mutex_;
  std::map<std::string, uint64_t> issued_;  // collectives this rank issued, per group
  std::map<std::string, std::vector<int>> members_;  // groups of some ranks only
  // The lowest count announced per group by an exited rank, and that rank.
  std::map<std::string, std::pair<uint64_t, int>> exited_counts_;
  int notices_received_ = 0;
  std::thread watcher_;
};

}  // namespace tessera::dist
