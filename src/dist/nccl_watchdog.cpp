#include "tessera/dist/nccl_watchdog.h"

#include "tessera/dist/errors.h"

namespace tessera::dist {

namespace {

double seconds(std::chrono::milliseconds duration) { return static_cast<double>(duration.count()) / 1000.0; }

}  // namespace

NcclWatchdog::NcclWatchdog(std::string where, std::chrono::milliseconds timeout, Hooks hooks,
                           std::chrono::milliseconds poll_interval, bool start_thread)
    : where_(std::move(where)), timeout_(timeout), hooks_(std::move(hooks)), poll_interval_(poll_interval) {
  if (start_thread) thread_ = std::thread([this] { run(); });
}

NcclWatchdog::~NcclWatchdog() { stop(); }

void NcclWatchdog::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void NcclWatchdog::watch(std::string description, std::function<bool()> done, Clock::time_point started) {
  std::lock_guard lock(mutex_);
  watched_.push_back({std::move(description), std::move(done), started});
}

void NcclWatchdog::poll(Clock::time_point now) {
  // Never in the middle of the group's own NCCL call (abort would free the communicator
  // under it): then the next round looks again.
  std::unique_lock call(call_lock_, std::try_to_lock);
  if (!call.owns_lock()) return;
  std::string message;
  {
    std::lock_guard lock(mutex_);
    if (failure_ || aborting_ || stopping_) return;
    std::string query_error;
    watched_.remove_if([&](Watched& w) {
      try {
        return w.done();
      } catch (const std::exception& e) {
        if (query_error.empty()) {
          query_error = detail::concat(w.description, " on ", where_, ": its completion could not be queried (",
                                       e.what(), "); the communicator was aborted");
        }
        return true;
      }
    });
    const std::string async = hooks_.async_error ? hooks_.async_error() : std::string();
    if (!query_error.empty()) {
      message = query_error;
    } else if (!async.empty()) {
      message = detail::concat("NCCL reported an asynchronous error on ", where_, ": ", async,
                               watched_.empty() ? std::string()
                                                : detail::concat(" (while ", watched_.front().description, " ran)"),
                               "; the communicator was aborted");
    } else if (!watched_.empty() && now - watched_.front().started > timeout_) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - watched_.front().started);
      message = detail::concat(watched_.front().description, " on ", where_, " did not complete within the timeout of ",
                               seconds(timeout_), " s (", seconds(waited), " s so far): a peer has died, hung or ",
                               "issued other collectives; the communicator was aborted (TESSERA_DIST_TIMEOUT sets ",
                               "the timeout)");
    }
  }
  if (!message.empty()) abort_with(message);
}

void NcclWatchdog::fail(const std::string& reason) {
  // The caller (the group's issuing thread) holds call_lock_ already.
  {
    std::lock_guard lock(mutex_);
    if (failure_) return;
  }
  abort_with(reason);
}

void NcclWatchdog::abort_with(const std::string& message) {
  {
    std::lock_guard lock(mutex_);
    if (failure_ || aborting_ || stopping_) return;
    aborting_ = true;
    watched_.clear();
  }
  // The communicator is aborted before the failure is visible: whoever sees failure()
  // knows the spinning kernels have been told to stop.
  if (hooks_.abort) hooks_.abort();
  std::exception_ptr error = std::make_exception_ptr(DistError(message));
  {
    std::lock_guard lock(mutex_);
    failure_ = error;
  }
  if (hooks_.post) hooks_.post(error);
}

std::exception_ptr NcclWatchdog::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

void NcclWatchdog::check() const {
  if (std::exception_ptr error = failure()) std::rethrow_exception(error);
}

size_t NcclWatchdog::watched() const {
  std::lock_guard lock(mutex_);
  return watched_.size();
}

void NcclWatchdog::run() {
  if (hooks_.thread_start) {
    try {
      hooks_.thread_start();
    } catch (...) {  // the queries then fail, and poll() reports that
    }
  }
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, poll_interval_, [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    try {
      poll();
    } catch (...) {  // a failing hook must not end the process; the next round tries again
    }
    lock.lock();
  }
}

}  // namespace tessera::dist
