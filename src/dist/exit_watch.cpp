// The exit notices between ranks (see exit_watch.h). A notice is text,
// "world=5;world.1=3;", on the exit watch's control channel.
#include "tessera/dist/exit_watch.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>
#include <vector>

#include "tessera/dist/errors.h"

namespace tessera::dist {

namespace {

constexpr int kExitNoticeTag = 7301;
constexpr auto kPollInterval = std::chrono::milliseconds(5);

std::map<std::string, uint64_t> parse_notice(const std::string& text) {
  std::map<std::string, uint64_t> counts;
  std::istringstream entries(text);
  for (std::string entry; std::getline(entries, entry, ';');) {
    size_t equals = entry.rfind('=');
    if (equals != std::string::npos) counts[entry.substr(0, equals)] = std::stoull(entry.substr(equals + 1));
  }
  return counts;
}

}  // namespace

ExitWatch::ExitWatch() : watcher_([this] { watch(); }) {}

ExitWatch::~ExitWatch() {
  if (watcher_.joinable()) watcher_.join();
}

void ExitWatch::before_issue(const std::string& group, uint64_t sequence, const std::string& call) {
  std::lock_guard lock(mutex_);
  auto exited = exited_counts_.find(group);
  if (exited != exited_counts_.end() && sequence >= exited->second.first) {
    throw DistError(detail::concat(call, " on group '", group, "', rank ", rank_, ": rank ", exited->second.second,
                                   " has already exited after issuing ", exited->second.first,
                                   " collectives on this group, so this one can never complete"));
  }
  issued_[group] = sequence + 1;
}

void ExitWatch::announce_exit_and_wait() {
  std::string notice;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [group, count] : issued_) notice += detail::concat(group, "=", count, ";");
  }
  for (int other = 0; other < size_; ++other) {
    if (other != rank_) channel_.send(other, kExitNoticeTag, notice);
  }
  if (watcher_.joinable()) watcher_.join();  // returns once every other rank's notice is in
  channel_.wait_for_sends();
}

void ExitWatch::set_members(const std::string& group, std::vector<int> world_ranks) {
  std::lock_guard lock(mutex_);
  members_[group] = std::move(world_ranks);
}

void ExitWatch::watch() {
  while (notices_received_ < size_ - 1) {
    std::optional<ControlChannel::Message> notice;
    try {
      notice = channel_.receive(kExitNoticeTag);
    } catch (const DistError&) {
      return;  // the channel failed: no notice can come in any more
    }
    if (notice) {
      receive_notice(notice->source, notice->text);
    } else {
      std::this_thread::sleep_for(kPollInterval);
    }
  }
}

void ExitWatch::receive_notice(int source, const std::string& text) {
  std::map<std::string, uint64_t> counts = parse_notice(text);
  std::lock_guard lock(mutex_);
  ++notices_received_;
  auto member = [&](const std::string& group) {
    auto known = members_.find(group);
    return known == members_.end() || std::find(known->second.begin(), known->second.end(), source) != known->second.end();
  };
  for (const auto& [group, issued_here] : issued_) {
    if (!member(group)) continue;
    auto there = counts.find(group);
    uint64_t issued_there = there == counts.end() ? 0 : there->second;
    if (issued_here > issued_there) {
      // This rank issued collective #issued_there, which the exited rank never will: the
      // communication thread is (or will be) blocked in it for good, beyond any exception.
      std::fprintf(stderr,
                   "tessera::dist: rank %d of %d: rank %d exited after issuing %llu collectives on group '%s', but "
                   "this rank issued %llu: collective #%llu can never complete.\n"
                   "tessera::dist: rank %d aborts the MPI job instead of waiting forever\n",
                   rank_, size_, source, static_cast<unsigned long long>(issued_there), group.c_str(),
                   static_cast<unsigned long long>(issued_here), static_cast<unsigned long long>(issued_there), rank_);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  for (const auto& [group, count] : counts) {
    auto known = exited_counts_.find(group);
    if (known == exited_counts_.end() || count < known->second.first) exited_counts_[group] = {count, source};
  }
}

}  // namespace tessera::dist
