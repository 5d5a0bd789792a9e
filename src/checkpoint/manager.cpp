#include "tessera/checkpoint/manager.h"

#include <sys/stat.h>

#include <cerrno>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>

#include "tessera/checkpoint/collective.h"
#include "tessera/checkpoint/errors.h"
#include "tessera/checkpoint/folder_lock.h"
#include "tessera/checkpoint/full.h"
#include "tessera/checkpoint/model_view.h"
#include "tessera/fsdp/fully_shard.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/durable.h"
#include "tessera/io/posix_file.h"

namespace tessera::checkpoint {

namespace {

constexpr const char* kLatest = "latest";

// "step-<digits>" -> the step; nullopt for other names.
std::optional<uint64_t> step_of(const std::string& name) {
  static const std::regex pattern("step-([0-9]{1,19})");
  std::smatch match;
  if (!std::regex_match(name, match, pattern)) return std::nullopt;
  return std::stoull(match[1].str());
}

bool is_directory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

bool is_regular_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

// The root's entries that make it hold checkpoints: `latest` (whatever it is) and every
// "step-N" entry, sorted by step.
struct RootEntries {
  bool has_latest = false;
  std::vector<std::pair<uint64_t, std::string>> steps;
  bool empty() const { return !has_latest && steps.empty(); }
  std::string summary() const {
    std::string text = has_latest ? "latest" : "";
    const size_t shown = std::min<size_t>(steps.size(), 3);
    for (size_t i = 0; i < shown; ++i) text += (text.empty() ? "" : ", ") + steps[steps.size() - 1 - i].second;
    if (steps.size() > shown) text += tessera::detail::concat(" and ", steps.size() - shown, " more");
    return text;
  }
};

RootEntries entries_of_root(const std::string& root) {
  RootEntries entries;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    std::string name = entry.path().filename().string();
    if (name == kLatest) entries.has_latest = true;
    if (std::optional<uint64_t> step = step_of(name)) entries.steps.emplace_back(*step, name);
  }
  std::sort(entries.steps.begin(), entries.steps.end());
  return entries;
}

// The root must be a folder, or not exist yet.
void check_root(const std::string& root) {
  struct stat info {};
  if (::stat(root.c_str(), &info) != 0) {
    if (errno == ENOENT) return;
    int error = errno;
    throw io::IOError(tessera::detail::concat("checkpoint folder '", root, "': ", io::os_error(error)));
  }
  if (!S_ISDIR(info.st_mode)) {
    throw io::IOError(tessera::detail::concat("checkpoint folder '", root, "' is ", io::file_type_name(info.st_mode),
                                              ", not a folder"));
  }
}

// What `latest` is when it cannot be read as a file: absent (nullopt), or why not.
std::optional<std::string> latest_problem(const std::string& pointer) {
  struct stat link {};
  if (::lstat(pointer.c_str(), &link) != 0) {
    if (errno == ENOENT) return std::nullopt;
    int error = errno;
    return tessera::detail::concat("cannot stat '", pointer, "': ", io::os_error(error));
  }
  if (!S_ISLNK(link.st_mode)) return "";
  struct stat target {};
  if (::stat(pointer.c_str(), &target) == 0) return "";
  int error = errno;
  std::error_code ignored;
  std::string to = std::filesystem::read_symlink(pointer, ignored).string();
  if (error == ELOOP) return tessera::detail::concat("'", pointer, "' is a symbolic link loop (via '", to, "')");
  return tessera::detail::concat("'", pointer, "' is a symbolic link to '", to, "', which ",
                                 error == ENOENT ? "does not exist" : io::os_error(error));
}

// Leftovers of crashed saves and removals: ".step-N.tmp", ".latest.tmp-...", ".step-N.old-...",
// ".step-N.deleting-...".
bool is_leftover(const std::string& name) {
  static const std::regex pattern(R"(\.(step-[0-9]+\.(tmp|old-[0-9]+-[0-9]+|deleting-[0-9]+-[0-9]+)|latest\.tmp-[0-9]+-[0-9]+))");
  return std::regex_match(name, pattern);
}

template <class F>
void filesystem_step(const std::string& what, F&& step) {
  try {
    step();
  } catch (const std::filesystem::filesystem_error& error) {
    throw io::IOError(tessera::detail::concat(what, ": ", error.what()));
  }
}

}  // namespace

CheckpointManager::CheckpointManager(std::string root, CheckpointManagerOptions options)
    : root_(std::move(root)), options_(options) {
  TS_CHECK(!root_.empty(), ValueError, "CheckpointManager: empty root");
  TS_CHECK(options_.keep_last >= 0, ValueError, "CheckpointManager: keep_last must be >= 0, got ", options_.keep_last);
}

CheckpointManager::~CheckpointManager() = default;
CheckpointManager::CheckpointManager(CheckpointManager&&) noexcept = default;
CheckpointManager& CheckpointManager::operator=(CheckpointManager&&) noexcept = default;

void CheckpointManager::claim(dist::ProcessGroup& group, bool resuming) {
  if (claimed_) return;
  // Rank 0 alone looks and locks: every rank then acts on one view of the folder.
  detail::run_on_every_rank(group, "opening checkpoint folder '" + root_ + "'", [&] {
    if (group.rank() != 0) return std::string();
    check_root(root_);
    auto lock = std::make_unique<detail::FolderLock>(root_);
    RootEntries entries = entries_of_root(root_);
    if (!resuming && !options_.overwrite && !entries.empty()) {
      throw CheckpointError(tessera::detail::concat(
          "checkpoint folder '", root_, "' holds the checkpoints of another run (", entries.summary(),
          "), which this run's saves would prune or replace: resume from them (CheckpointManager::restore; --resume in "
          "the examples), or replace them (CheckpointManagerOptions::overwrite; --overwrite-checkpoints), or use "
          "another folder"));
    }
    lock_ = std::move(lock);
    return std::string();
  });
  claimed_ = true;
}

std::string CheckpointManager::directory_name(uint64_t step) {
  char name[40];
  std::snprintf(name, sizeof name, "step-%08llu", static_cast<unsigned long long>(step));
  return name;
}

std::vector<std::string> CheckpointManager::checkpoints() const {
  std::vector<std::pair<uint64_t, std::string>> found;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(root_, error)) {
    std::string name = entry.path().filename().string();
    std::optional<uint64_t> step = step_of(name);
    if (step && exists(root_ + "/" + name + "/" + kMetadataFile)) found.emplace_back(*step, root_ + "/" + name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (auto& [step, path] : found) paths.push_back(std::move(path));
  return paths;
}

std::optional<std::string> CheckpointManager::latest() const {
  const std::string pointer = root_ + "/" + kLatest;
  std::optional<std::string> problem = latest_problem(pointer);
  if (!problem) return std::nullopt;
  if (!problem->empty()) throw io::FormatError(tessera::detail::concat(pointer, ": byte 0: ", *problem));
  io::FileDescriptor fd = io::open_regular_file(pointer);  // a FIFO is refused, not waited on
  std::string text(64, '\0');
  int64_t got = io::pread_full(fd.get(), text.data(), text.size(), 0);
  if (got < 0) throw io::IOError(tessera::detail::concat("cannot read '", pointer, "': ", io::os_error(static_cast<int>(-got))));
  text.resize(static_cast<size_t>(got));
  std::string name = text;
  if (!name.empty() && name.back() == '\n') name.pop_back();
  if (!step_of(name)) {
    throw io::FormatError(tessera::detail::concat(pointer, ": byte 0: expected \"step-<digits>\\n\" naming a checkpoint of ",
                                                  root_, ", found ", text.size(), " bytes that do not (corrupt?)"));
  }
  const std::string path = root_ + "/" + name;
  if (!is_directory(path)) {
    throw io::FormatError(tessera::detail::concat(pointer, ": byte 0: names '", name, "', but ", path,
                                                  " is not a directory (was it removed?)"));
  }
  if (!is_regular_file(path + "/" + kMetadataFile)) {
    throw io::FormatError(tessera::detail::concat(pointer, ": byte 0: names '", name, "', but ", path,
                                                  " has no ", kMetadataFile, " (an incomplete checkpoint)"));
  }
  return path;
}

std::optional<ResumePoint> CheckpointManager::resume_point() const {
  check_root(root_);
  if (!exists(root_)) return std::nullopt;
  std::string problem;
  try {
    if (std::optional<std::string> path = latest()) return ResumePoint{*path, ""};
  } catch (const io::IOError& error) {
    problem = error.what();
  }
  const std::string latest_says =
      problem.empty() ? tessera::detail::concat("'", root_, "/", kLatest, "' is missing (a crash right after a save?)")
                      : problem;
  RootEntries entries = entries_of_root(root_);
  if (entries.steps.empty()) {
    if (problem.empty()) return std::nullopt;  // nothing was ever saved here
    throw CheckpointError(tessera::detail::concat("cannot resume from '", root_, "': ", latest_says,
                                                  ", and it holds no step folder to resume from instead"));
  }
  // The newest step folder that checks out: its metadata (with its CRC) and every rank file's header.
  std::string skipped;
  for (auto it = entries.steps.rbegin(); it != entries.steps.rend(); ++it) {
    const std::string path = root_ + "/" + it->second;
    try {
      ShardedCheckpoint checkpoint(path);
      checkpoint.check_files();
      return ResumePoint{path, tessera::detail::concat(latest_says, "; resuming from the newest complete checkpoint, ",
                                                       path, skipped.empty() ? "" : " (skipped: " + skipped + ")")};
    } catch (const Error& error) {
      skipped += tessera::detail::concat(skipped.empty() ? "" : "; ", it->second, ": ", error.what());
    }
  }
  throw CheckpointError(tessera::detail::concat("cannot resume from '", root_, "': ", latest_says,
                                                ", and none of its step folders is a complete checkpoint: ", skipped));
}

std::string CheckpointManager::save(nn::Module& model, const Stateful& with, const TrainingState& training) {
  const std::string path = root_ + "/" + directory_name(training.step);
  // Hybrid sharding: the first replica writes (and holds the folder's lock), the others
  // wait for it (model_view.h).
  detail::on_first_replica(model, "saving checkpoint '" + path + "'", [&] { save_here(model, with, training); });
  return path;
}

void CheckpointManager::save_here(nn::Module& model, const Stateful& with, const TrainingState& training) {
  dist::ProcessGroup& group = fsdp::process_group(model);
  claim(group);
  const std::string name = directory_name(training.step);
  const std::string path = root_ + "/" + name;
  const std::string what = "saving checkpoint '" + path + "'";

  detail::run_on_every_rank(group, what, [&] {
    if (group.rank() != 0) return std::string();
    filesystem_step(what, [&] {
      std::filesystem::create_directories(root_);
      for (const auto& entry : std::filesystem::directory_iterator(root_)) {
        if (is_leftover(entry.path().filename().string())) std::filesystem::remove_all(entry.path());
      }
    });
    return std::string();
  });
  save_sharded(path, model, with, training);
  detail::run_on_every_rank(group, what, [&] {
    if (group.rank() != 0) return std::string();
    const std::string text = name + "\n";
    io::AtomicFile pointer(root_ + "/" + kLatest);
    pointer.write(text.data(), text.size());
    pointer.commit();
    // Checkpoints of later steps belong to a run that was abandoned (resumed from before
    // them); then the oldest beyond keep_last.
    std::vector<std::string> complete = checkpoints();
    std::vector<std::string> kept;
    for (const std::string& candidate : complete) {
      std::string candidate_name = std::filesystem::path(candidate).filename().string();
      if (*step_of(candidate_name) > training.step) {
        io::remove_directory_durably(candidate);
      } else {
        kept.push_back(candidate);
      }
    }
    if (options_.keep_last > 0) {
      for (size_t i = 0; i + static_cast<size_t>(options_.keep_last) < kept.size(); ++i) {
        if (kept[i] != path) io::remove_directory_durably(kept[i]);
      }
    }
    return std::string();
  });
}

std::optional<TrainingState> CheckpointManager::restore(nn::Module& model, const Stateful& with) {
  dist::ProcessGroup& group = fsdp::process_group(model);
  // One lock per folder: under hybrid sharding the first replica's rank 0 holds it.
  detail::on_first_replica(model, "opening checkpoint folder '" + root_ + "'", [&] { claim(group, true); });
  // Rank 0 picks; "" for none, else the path, a newline and the note.
  std::vector<std::string> picked = detail::run_on_every_rank(group, "resuming from '" + root_ + "'", [&] {
    if (group.rank() != 0) return std::string();
    std::optional<ResumePoint> point = resume_point();
    return point ? point->path + "\n" + point->note : std::string();
  });
  if (picked[0].empty()) return std::nullopt;
  const size_t newline = picked[0].find('\n');
  ResumePoint point{picked[0].substr(0, newline), picked[0].substr(newline + 1)};
  TrainingState state = load_sharded(point.path, model, with);
  resumed_from_ = std::move(point);
  return state;
}

std::string resolve(const std::string& path) {
  if (!is_directory(path) || exists(path + "/" + kMetadataFile)) return path;
  std::optional<ResumePoint> point = CheckpointManager(path).resume_point();
  TS_CHECK(point.has_value(), io::IOError, "'", path, "' holds no checkpoint: neither ", kMetadataFile,
           " (a sharded checkpoint) nor '", kLatest, "' (a folder of checkpoints)");
  return point->path;
}

std::unique_ptr<FlatSource> open(const std::string& path) {
  std::string resolved = resolve(path);
  if (is_directory(resolved)) return std::make_unique<ShardedCheckpoint>(resolved);
  return std::make_unique<FullCheckpoint>(resolved);
}

TrainingState load(const std::string& path, nn::Module& model, const Stateful& with) {
  std::string resolved = resolve(path);
  if (is_directory(resolved)) return load_sharded(resolved, model, with);
  return load_full(resolved, model, with);
}

}  // namespace tessera::checkpoint
