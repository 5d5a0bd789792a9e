// Work: a handle on a collective started asynchronously (the `_async` forms of
// ProcessGroup). wait() blocks until the collective is done and rethrows its error, if it
// had one, every time it is called; is_completed() polls. The handle keeps the call's
// tensors alive, but their contents belong to the collective until wait() returns: do not
// read an output or write an input before then.
//
//   auto gathered = group.all_gather_into_async(full, shard);
//   compute_something_else();
//   gathered->wait();
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>

namespace tessera::dist {

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool is_completed() const = 0;
  // "#5 all_gather float32 x 1024 on group 'world'"
  virtual std::string description() const = 0;
};

// Finished when created: the single-rank group does its copies at once.
class CompletedWork final : public Work {
 public:
  explicit CompletedWork(std::string description) : description_(std::move(description)) {}
  void wait() override {}
  bool is_completed() const override { return true; }
  std::string description() const override { return description_; }

 private:
  std::string description_;
};

// Finished by another thread (the MPI group's communication thread) through finish().
// `waits`, when given, is told when a thread starts (true) and stops (false) waiting on it
// (the MPI watchdog's deadlock check).
class PendingWork final : public Work {
 public:
  explicit PendingWork(std::string description, std::function<void(bool)> waits = {})
      : description_(std::move(description)), waits_(std::move(waits)) {}
  void wait() override;
  bool is_completed() const override;
  std::string description() const override { return description_; }
  // Marks the work done, with the exception that ended it (null on success).
  void finish(std::exception_ptr error);

 private:
  std::string description_;
  std::function<void(bool)> waits_;
  mutable std::mutex mutex_;
  std::condition_variable finished_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace tessera::dist
