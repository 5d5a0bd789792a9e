// PendingWork: completion handed from the communication thread to the waiting thread.
#include "tessera/dist/work.h"

namespace tessera::dist {

void PendingWork::wait() {
  std::unique_lock lock(mutex_);
  if (!done_ && waits_) {
    waits_(true);
    finished_.wait(lock, [this] { return done_; });
    waits_(false);
  }
  finished_.wait(lock, [this] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool PendingWork::is_completed() const {
  std::lock_guard lock(mutex_);
  return done_;
}

void PendingWork::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
    error_ = std::move(error);
  }
  finished_.notify_all();
}

}  // namespace tessera::dist
