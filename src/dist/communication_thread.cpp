// The FIFO task loop behind the MPI group's asynchronous collectives.
#include "tessera/dist/communication_thread.h"

namespace tessera::dist {

CommunicationThread::CommunicationThread() : thread_([this] { run(); }) {}

CommunicationThread::~CommunicationThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  has_task_.notify_one();
  thread_.join();
}

void CommunicationThread::submit(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  has_task_.notify_one();
}

void CommunicationThread::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      has_task_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and nothing left to run
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace tessera::dist
