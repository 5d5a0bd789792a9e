// NcclWatchdog: what keeps a dead or hung peer from hanging an NCCL group's ranks.
//
// An NCCL collective is queued on the device and the host goes on; if a peer never joins,
// the kernel spins forever, and so does whatever waits for it: the next item() (the
// compute stream waits for the collective), the group's destructor. NCCL reports
// asynchronous failures (a peer's connection dropped: ncclRemoteError, ...) only when
// asked (ncclCommGetAsyncError). So each NCCL group has a watchdog thread that, every
// poll interval (100 ms), forgets the collectives whose completion event has fired, asks
// NCCL for an asynchronous error, and checks the oldest unfinished collective against the
// group's timeout (ProcessGroup::timeout(): TESSERA_DIST_TIMEOUT, dist::init's option,
// 10 minutes by default, as PyTorch's). On either it aborts the communicator
// (ncclCommAbort makes the spinning kernels return), records the error, and posts it to
// the device (cuda::post_device_error), so the host wait that was stuck returns and
// throws it: every rank fails with a DistError naming the collective, its sequence
// number, the group and the timeout, instead of hanging. The group is unusable from then
// on: every later call, Work::wait() included, throws the same error. PyTorch's NCCL
// watchdog does the same and then tears the process down; Tessera leaves that to the
// program (the library never exits).
//
// This class holds the rule and knows nothing of NCCL or CUDA: the group gives it hooks
// (is a collective done, NCCL's asynchronous error, abort, post), so the rule is tested
// on any machine (tests/dist/test_nccl_watchdog.cpp) with a clock of the test's own.
// Internal.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>

namespace tessera::dist {

class NcclWatchdog {
 public:
  using Clock = std::chrono::steady_clock;

  struct Hooks {
    // NCCL's asynchronous error for the communicator: "" when none (ncclCommGetAsyncError).
    std::function<std::string()> async_error;
    // Aborts the communicator (ncclCommAbort); called once, with the group's call lock held.
    std::function<void()> abort;
    // Makes the waits that may be stuck throw `error` (cuda::post_device_error).
    std::function<void(std::exception_ptr)> post;
    // Runs first on the watchdog's thread: makes the group's device current (cudaSetDevice),
    // so that its event queries do not create a context on device 0 for every rank.
    std::function<void()> thread_start{};
  };

  // `where` names the group in messages ("rank 1 of group 'world.nccl' (size 2)"). With
  // `start_thread` false nothing polls by itself: the tests call poll().
  NcclWatchdog(std::string where, std::chrono::milliseconds timeout, Hooks hooks,
               std::chrono::milliseconds poll_interval = std::chrono::milliseconds(100), bool start_thread = true);
  ~NcclWatchdog();  // stop()s
  // Stops the thread and the hooks for good (the communicator is going away); idempotent.
  void stop();
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  // Watches one queued collective ("#12 all_gather float32 x 4096") until `done()`. A
  // `done()` that throws (an event query after a sticky CUDA error) counts as done, and its
  // error fails the group like a timeout: the rule goes on running for the rest.
  void watch(std::string description, std::function<bool()> done, Clock::time_point started = Clock::now());
  // One round of the thread's work at time `now`.
  void poll(Clock::time_point now = Clock::now());
  // Aborts the communicator now, for `reason` (the group's own timed waits use this).
  void fail(const std::string& reason);

  // The error that ended the group, or null while it is healthy.
  std::exception_ptr failure() const;
  // Throws failure() if there is one.
  void check() const;
  // Collectives being watched.
  size_t watched() const;
  // Held while the group issues an NCCL call: the watchdog never aborts in the middle of one.
  std::mutex& call_lock() { return call_lock_; }

 private:
  struct Watched {
    std::string description;
    std::function<bool()> done;
    Clock::time_point started;
  };
  void abort_with(const std::string& message);  // call_lock_ held
  void run();

  std::string where_;
  std::chrono::milliseconds timeout_;
  Hooks hooks_;
  std::chrono::milliseconds poll_interval_;
  mutable std::mutex mutex_;  // watched_, failure_
  std::mutex call_lock_;
  std::list<Watched> watched_;
  std::exception_ptr failure_;
  bool aborting_ = false;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tessera::dist
