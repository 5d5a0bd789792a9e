// The watchdog thread: answering other ranks' questions, watching this rank's calls in
// flight, and ending the job when one can never complete (see watchdog.h). Messages are
// text on the watchdog's own control channel: a question carries its id, an answer the id
// and the RankProgress encoding, a failure the message every rank prints.
#include "tessera/dist/watchdog.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "tessera/dist/errors.h"
#include "tessera/tensor/error.h"

namespace tessera::dist {

namespace {

constexpr int kQuestionTag = 7401;
constexpr int kAnswerTag = 7402;
constexpr int kFailureTag = 7403;
constexpr int kAcknowledgeTag = 7404;

constexpr auto kPollInterval = std::chrono::milliseconds(10);
// A call running this long, with every issuing thread of its rank waiting, makes the
// watchdog look for a deadlock (and again each such interval while it runs).
constexpr auto kStallInterval = std::chrono::seconds(1);
// How long a question waits for answers; a rank silent that long is stopped or beyond reach.
constexpr auto kAnswerWindow = std::chrono::seconds(2);
// How long a failing rank waits for the others to print the failure before aborting, and
// how long a rank told of a failure waits for the abort before aborting itself.
constexpr auto kAcknowledgeWindow = std::chrono::seconds(1);
constexpr auto kAbortFallback = std::chrono::seconds(5);

}  // namespace

CollectiveWatchdog::CollectiveWatchdog() : thread_([this] { watch(); }) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

void CollectiveWatchdog::hold_if_aborting() const {
  while (aborting_) std::this_thread::sleep_for(std::chrono::seconds(1));  // until MPI_Abort ends the process
}

void CollectiveWatchdog::issued(const std::string& group, uint64_t sequence) {
  hold_if_aborting();
  std::lock_guard lock(mutex_);
  GroupProgress& progress = groups_[group].progress;
  progress.group = group;
  progress.issued = sequence + 1;
  issuers_.try_emplace(std::this_thread::get_id(), 0);
  changed();
}

void CollectiveWatchdog::begins(const std::string& group, std::string call, std::chrono::milliseconds timeout) {
  std::lock_guard lock(mutex_);
  Group& entry = groups_[group];
  entry.progress.group = group;
  ++entry.progress.begun;
  entry.progress.running = true;
  entry.progress.call = std::move(call);
  entry.since = std::chrono::steady_clock::now();
  entry.timeout = timeout;
  changed();
}

void CollectiveWatchdog::ends(const std::string& group) {
  hold_if_aborting();
  std::lock_guard lock(mutex_);
  GroupProgress& progress = groups_[group].progress;
  progress.running = false;
  progress.call.clear();
  changed();
}

void CollectiveWatchdog::wait_begins() {
  std::lock_guard lock(mutex_);
  ++issuers_[std::this_thread::get_id()];
  changed();
}

void CollectiveWatchdog::wait_ends() {
  std::lock_guard lock(mutex_);
  --issuers_[std::this_thread::get_id()];
  changed();
}

void CollectiveWatchdog::exiting() {
  std::lock_guard lock(mutex_);
  exiting_ = true;
  changed();
}

void CollectiveWatchdog::set_members(const std::string& group, std::vector<int> world_ranks) {
  std::sort(world_ranks.begin(), world_ranks.end());
  std::lock_guard lock(mutex_);
  GroupProgress& progress = groups_[group].progress;
  progress.group = group;
  progress.members = std::move(world_ranks);
  changed();
}

RankProgress CollectiveWatchdog::snapshot() {
  std::lock_guard lock(mutex_);
  RankProgress progress;
  progress.changes = changes_;
  progress.exiting = exiting_;
  progress.waiting = !issuers_.empty();
  for (const auto& [thread, waits] : issuers_) progress.waiting = progress.waiting && waits > 0;
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [name, entry] : groups_) {
    GroupProgress group = entry.progress;
    if (group.running) group.running_seconds = std::chrono::duration<double>(now - entry.since).count();
    progress.groups.push_back(std::move(group));
  }
  return progress;
}

void CollectiveWatchdog::watch() {
  while (!stopping_) {
    receive_messages();
    if (abort_at_ && std::chrono::steady_clock::now() >= *abort_at_) {
      aborting_ = true;
      std::fprintf(stderr, "tessera::dist: rank %d of %d aborts the MPI job\n", rank_, size_);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    check_running_calls();
    conclude_inquiry();
    channel_.complete_sends();
    std::this_thread::sleep_for(kPollInterval);
  }
  // A send still pending now is left to the channel's destructor.
}

void CollectiveWatchdog::receive_messages() {
  while (std::optional<ControlChannel::Message> message = receive()) {
    handle(message->source, message->tag, std::move(message->text));
  }
}

void CollectiveWatchdog::handle(int source, int tag, std::string text) {
  if (tag == kQuestionTag) {
    send(source, kAnswerTag, text + "\n" + snapshot().encode());
  } else if (tag == kAnswerTag) {
    size_t newline = text.find('\n');
    if (!inquiry_ || newline == std::string::npos || text.substr(0, newline) != std::to_string(inquiry_->id)) return;
    try {
      inquiry_->answers[static_cast<size_t>(source)] = RankProgress::decode(std::string_view(text).substr(newline + 1));
    } catch (const ValueError&) {  // not from a Tessera of this version: counts as no answer
    }
  } else if (tag == kFailureTag) {
    if (!abort_at_) {  // several ranks may find the failure: print the first report only
      aborting_ = true;
      std::fprintf(stderr, "tessera::dist: rank %d of %d: %s\n", rank_, size_, text.c_str());
      std::fflush(stderr);
    }
    send(source, kAcknowledgeTag, "");
    if (!abort_at_) abort_at_ = std::chrono::steady_clock::now() + kAbortFallback;
  }
}

void CollectiveWatchdog::check_running_calls() {
  if (abort_at_ || (inquiry_ && inquiry_->purpose == Purpose::timeout)) return;
  const auto now = std::chrono::steady_clock::now();
  std::optional<Inquiry> timed_out;
  bool stalled = false;
  {
    std::lock_guard lock(mutex_);
    bool waiting = !issuers_.empty();
    for (const auto& [thread, waits] : issuers_) waiting = waiting && waits > 0;
    for (const auto& [name, entry] : groups_) {
      if (!entry.progress.running) continue;
      if (now - entry.since >= entry.timeout) {
        timed_out = Inquiry{.purpose = Purpose::timeout, .group = name, .call = entry.progress.call,
                            .sequence = entry.progress.begun - 1, .timeout = entry.timeout};
        break;
      }
      stalled = stalled || (waiting && now - entry.since >= kStallInterval);
    }
  }
  if (timed_out) {
    start_inquiry(std::move(*timed_out));  // replaces a deadlock check under way
  } else if (stalled && !inquiry_ && now - last_deadlock_check_ >= kStallInterval) {
    start_inquiry({.purpose = Purpose::deadlock});
  }
}

void CollectiveWatchdog::start_inquiry(Inquiry inquiry) {
  inquiry.id = next_inquiry_++;
  inquiry.started = std::chrono::steady_clock::now();
  inquiry.answers.assign(static_cast<size_t>(size_), std::nullopt);
  inquiry.answers[static_cast<size_t>(rank_)] = snapshot();
  for (int other = 0; other < size_; ++other) {
    if (other != rank_) send(other, kQuestionTag, std::to_string(inquiry.id));
  }
  inquiry_ = std::move(inquiry);
}

void CollectiveWatchdog::conclude_inquiry() {
  if (!inquiry_ || abort_at_) return;
  const auto now = std::chrono::steady_clock::now();
  bool all_answered = true;
  for (const auto& answer : inquiry_->answers) all_answered = all_answered && answer.has_value();
  if (!all_answered && now - inquiry_->started < kAnswerWindow) return;
  Inquiry inquiry = std::move(*inquiry_);
  inquiry_.reset();

  if (inquiry.purpose == Purpose::timeout) {
    {
      // The call may have completed while the answers came in (a late rank arrived).
      std::lock_guard lock(mutex_);
      const GroupProgress& progress = groups_[inquiry.group].progress;
      if (!progress.running || progress.begun - 1 != inquiry.sequence) return;
    }
    abort_job(timeout_message(inquiry.answers, rank_, inquiry.group, inquiry.sequence, inquiry.call, inquiry.timeout));
  }
  last_deadlock_check_ = now;
  if (!all_answered) return;  // a silent rank: the timeout will name it
  std::string message = deadlock_message(inquiry.answers, rank_);
  if (message.empty()) return;
  if (inquiry.round == 1) {
    // Ask again once every first answer is in: if no rank changed in between, there was a
    // moment when every rank was as it answered, and from there nothing can move.
    start_inquiry({.purpose = Purpose::deadlock, .round = 2, .previous = std::move(inquiry.answers)});
    return;
  }
  for (size_t rank = 0; rank < inquiry.answers.size(); ++rank) {
    if (inquiry.answers[rank]->changes != inquiry.previous[rank]->changes) return;
  }
  abort_job(message);
}

void CollectiveWatchdog::abort_job(const std::string& message) {
  aborting_ = true;
  std::fprintf(stderr, "tessera::dist: rank %d of %d: %s\ntessera::dist: rank %d aborts the MPI job\n", rank_, size_,
               message.c_str(), rank_);
  std::fflush(stderr);
  for (int other = 0; other < size_; ++other) {
    if (other != rank_) send(other, kFailureTag, message);
  }
  // Let the others print it: until every other rank acknowledged, or the window closes.
  int acknowledged = 0;
  const auto deadline = std::chrono::steady_clock::now() + kAcknowledgeWindow;
  while (acknowledged < size_ - 1 && std::chrono::steady_clock::now() < deadline) {
    if (receive(kAcknowledgeTag)) {
      ++acknowledged;
    } else {
      std::this_thread::sleep_for(kPollInterval);
    }
  }
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return
}

std::optional<ControlChannel::Message> CollectiveWatchdog::receive(int tag) {
  try {
    return channel_.receive(tag);
  } catch (const DistError&) {
    return std::nullopt;
  }
}

void CollectiveWatchdog::send(int destination, int tag, std::string text) {
  try {
    channel_.send(destination, tag, std::move(text));
  } catch (const DistError&) {
  }
}

}  // namespace tessera::dist
