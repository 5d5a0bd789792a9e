// ControlChannel: short text messages between ranks on a communicator of their own, for
// the threads that watch the job beside its collectives (the exit watch, exit_watch.h, and
// the collective watchdog, watchdog.h). Their notices must never match a collective's
// messages, nor each other's, so each owns a channel: a duplicate of MPI_COMM_WORLD.
//
// Nothing here blocks but wait_for_sends(): receive() polls (MPI_Iprobe; a blocking MPI
// receive would spin a core, so the watchers sleep between polls) and send() starts an
// MPI_Isend whose bytes the channel keeps until MPI is done with them. A send still
// pending when the channel is destroyed goes to a rank that stopped listening: its request
// is freed and its bytes stay allocated, since MPI may still read them, for the little
// time left before MPI_Finalize.
//
// receive() may run on one thread while another sends; send(), complete_sends() and
// wait_for_sends() on one thread at a time. Internal (needs <mpi.h>).
#pragma once

#include <list>
#include <optional>
#include <string>

#include "tessera/dist/mpi_check.h"

namespace tessera::dist {

class ControlChannel {
 public:
  struct Message {
    int source = -1;  // the sending rank
    int tag = 0;
    std::string text;
  };

  // Duplicates MPI_COMM_WORLD, with MPI errors returned (a DistError here), not fatal.
  ControlChannel();
  // Frees the communicator (see above for sends still pending).
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // The next message under `tag` (any tag by default) if one has arrived; never waits.
  // Throws DistError when MPI fails.
  std::optional<Message> receive(int tag = MPI_ANY_TAG);
  // Starts sending `text` to rank `destination` under `tag` and returns. Throws DistError
  // when MPI refuses the send.
  void send(int destination, int tag, std::string text);
  // Forgets the sends that have completed.
  void complete_sends();
  // Waits until every send has completed. Throws DistError when one fails.
  void wait_for_sends();

 private:
  struct Send {
    std::string text;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::list<Send> sends_;  // a list: MPI reads each text where it is until its send completes
};

}  // namespace tessera::dist
