// CommunicationThread: one thread that runs a group's collectives, one at a time, in the
// order they were submitted.
//
// Why a thread: Open MPI 4.1 has no asynchronous progress ("OMPI progress: no" in
// ompi_info), so a non-blocking MPI collective only advances while the process is inside
// an MPI call; a rank busy computing would stall every other rank's all-gather. A thread
// that runs the blocking MPI collective gives real overlap with computation. FIFO order
// keeps every rank's MPI call sequence the one its program issued.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace tessera::dist {

class CommunicationThread {
 public:
  CommunicationThread();
  // Runs what is still queued (the other ranks expect those calls), then joins.
  ~CommunicationThread();
  CommunicationThread(const CommunicationThread&) = delete;
  CommunicationThread& operator=(const CommunicationThread&) = delete;

  // `task` must not throw: it reports its outcome through its own Work.
  void submit(std::function<void()> task);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable has_task_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace tessera::dist
