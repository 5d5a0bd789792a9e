// Snapshots of ranks' collectives: their wire form and what the watchdog reads in them.
#include "tessera/dist/rank_progress.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "tessera/tensor/error.h"

namespace tessera::dist {

namespace {

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  for (size_t end; (end = text.find(separator, begin)) != std::string_view::npos; begin = end + 1) {
    parts.push_back(text.substr(begin, end - begin));
  }
  parts.push_back(text.substr(begin));
  return parts;
}

template <class T>
T parse_number(std::string_view text) {
  T value{};
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  TS_CHECK(error == std::errc() && end == text.data() + text.size(), ValueError,
           "rank progress: expected a number, got '", text, "'");
  return value;
}

// Whether `rank` belongs to `group` as rank `asking` knows it (a group of some ranks, made
// by splitting the world, lists its members).
bool is_member(const Answers& answers, int asking, std::string_view group, int rank) {
  const std::optional<RankProgress>& own = answers[static_cast<size_t>(asking)];
  const GroupProgress* progress = own ? own->find(group) : nullptr;
  if (progress == nullptr || progress->members.empty()) return true;
  return std::find(progress->members.begin(), progress->members.end(), rank) != progress->members.end();
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += (text.empty() ? "" : ",") + std::to_string(rank);
  return text;
}

std::string plural(uint64_t count, const char* noun) {
  return detail::concat(count, " ", noun, count == 1 ? "" : "s");
}


// "; it waits in #1 barrier on group 'world'": where else a rank is stuck.
std::string elsewhere(const RankProgress& progress, std::string_view group) {
  std::string text;
  for (const GroupProgress& other : progress.groups) {
    if (other.running && other.group != group) text += detail::concat("; it is in ", other.call, " on group '", other.group, "'");
  }
  return text;
}

}  // namespace

std::string holdups(const Answers& answers, int asking, std::string_view group, uint64_t sequence,
                    std::string_view call) {
  std::ostringstream out;
  int count = 0;
  for (int rank = 0; rank < static_cast<int>(answers.size()); ++rank) {
    if (rank == asking || !is_member(answers, asking, group, rank)) continue;
    if (std::optional<std::string> reason = holdup(answers, rank, group, sequence, call)) {
      out << (count++ > 0 ? "; " : "") << "rank " << rank << " (" << *reason << ")";
    }
  }
  return out.str();
}

const GroupProgress* RankProgress::find(std::string_view group) const {
  for (const GroupProgress& progress : groups) {
    if (progress.group == group) return &progress;
  }
  return nullptr;
}

std::string RankProgress::encode() const {
  std::ostringstream out;
  out << "rank\t" << changes << '\t' << (waiting ? 1 : 0) << '\t' << (exiting ? 1 : 0);
  for (const GroupProgress& group : groups) {
    out << "\ngroup\t" << group.group << '\t' << group.issued << '\t' << group.begun << '\t' << (group.running ? 1 : 0)
        << '\t' << group.running_seconds << '\t' << join_ranks(group.members) << '\t' << group.call;
  }
  return out.str();
}

RankProgress RankProgress::decode(std::string_view text) {
  RankProgress progress;
  std::vector<std::string_view> lines = split(text, '\n');
  std::vector<std::string_view> head = split(lines[0], '\t');
  TS_CHECK(head.size() == 4 && head[0] == "rank", ValueError, "rank progress: unexpected first line '", lines[0], "'");
  progress.changes = parse_number<uint64_t>(head[1]);
  progress.waiting = parse_number<int>(head[2]) != 0;
  progress.exiting = parse_number<int>(head[3]) != 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string_view> fields = split(lines[i], '\t');
    TS_CHECK(fields.size() == 8 && fields[0] == "group", ValueError, "rank progress: unexpected line '", lines[i], "'");
    GroupProgress group;
    group.group = fields[1];
    group.issued = parse_number<uint64_t>(fields[2]);
    group.begun = parse_number<uint64_t>(fields[3]);
    group.running = parse_number<int>(fields[4]) != 0;
    group.running_seconds = std::stod(std::string(fields[5]));
    if (!fields[6].empty()) {
      for (std::string_view member : split(fields[6], ',')) group.members.push_back(parse_number<int>(member));
    }
    group.call = fields[7];
    progress.groups.push_back(std::move(group));
  }
  return progress;
}

std::optional<std::string> holdup(const Answers& answers, int rank, std::string_view group, uint64_t sequence,
                                  std::string_view call) {
  const std::optional<RankProgress>& answer = answers[static_cast<size_t>(rank)];
  if (!answer) {
    return std::string("it did not answer: stopped, or stuck where Tessera cannot reach it");
  }
  const GroupProgress* progress = answer->find(group);
  const uint64_t issued = progress ? progress->issued : 0;
  const uint64_t begun = progress ? progress->begun : 0;
  if (begun > sequence + 1) return std::nullopt;  // past it
  if (begun == sequence + 1) {
    if (!progress->running || progress->call == call) return std::nullopt;  // done with it, or in it
    return detail::concat("it is in ", progress->call, " there");
  }
  std::string exited = answer->exiting ? " has returned from main and" : "";
  if (issued <= sequence) {
    return detail::concat("it", exited, " has issued ", plural(issued, "collective"), " on group '", group,
                          "', not yet #", sequence, elsewhere(*answer, group));
  }
  return detail::concat("it", exited, " has issued it, but its communication thread has not begun it",
                        progress->running ? detail::concat(" (it is still in ", progress->call, ")") : std::string(),
                        elsewhere(*answer, group));
}

std::string timeout_message(const Answers& answers, int seen_on, std::string_view group, uint64_t sequence,
                            std::string_view call, std::chrono::milliseconds timeout) {
  std::string late = holdups(answers, seen_on, group, sequence, call);
  std::ostringstream out;
  out << "collective timeout on group '" << group << "' (seen on rank " << seen_on << " of " << answers.size()
      << "): " << call << " waited more than " << static_cast<double>(timeout.count()) / 1000.0
      << " s for the other ranks. ";
  if (late.empty()) {
    out << "Every rank has begun it, so the transfer itself is stuck (the network, or MPI).";
  } else {
    out << "Did not arrive: " << late << ".";
  }
  out << " The timeout is dist::init's InitOptions::timeout, else TESSERA_DIST_TIMEOUT seconds (default "
      << std::chrono::duration_cast<std::chrono::seconds>(std::chrono::minutes(10)).count() << ").";
  return out.str();
}

std::string deadlock_message(const Answers& answers, int seen_on) {
  for (const std::optional<RankProgress>& answer : answers) {
    if (!answer || !answer->waiting || answer->exiting) return "";
  }
  std::ostringstream details;
  size_t in_flight = 0;
  for (int rank = 0; rank < static_cast<int>(answers.size()); ++rank) {
    for (const GroupProgress& progress : answers[static_cast<size_t>(rank)]->groups) {
      if (!progress.running) continue;
      std::string late = holdups(answers, rank, progress.group, progress.begun - 1, progress.call);
      if (late.empty()) return "";  // this call can complete: not a deadlock
      details << (in_flight++ > 0 ? "; " : "") << "rank " << rank << " is in " << progress.call << " on group '"
              << progress.group << "', waiting for " << late;
    }
  }
  if (in_flight == 0) return "";
  return detail::concat("collectives that can never complete (seen on rank ", seen_on, " of ", answers.size(),
                        "): every rank waits, and every collective in flight waits for a rank that is elsewhere: ",
                        details.str(),
                        ". Every rank must issue the same collectives on each group, in the same order.");
}

}  // namespace tessera::dist
