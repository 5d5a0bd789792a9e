#include "tessera/checkpoint/manager.h"

#include <sys/stat.h>

#include <cerrno>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <regex>

#include "tessera/checkpoint/collective.h"
#include "tessera/checkpoint/errors.h"
#include "tessera/checkpoint/finite.h"
#include "tessera/checkpoint/folder_lock.h"
#include "tessera/checkpoint/full.h"
#include "tessera/checkpoint/model_view.h"
#include "tessera/checkpoint/sharded_writer.h"
#include "tessera/checkpoint/staging.h"
#include "tessera/dist/errors.h"
#include "tessera/fsdp/fully_shard.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/durable.h"
#include "tessera/io/posix_file.h"
#include "tessera/tensor/memory_limit.h"

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

// The complete checkpoints under `root` ("step-N" folders with a metadata.json), oldest first.
std::vector<std::string> complete_checkpoints(const std::string& root) {
  std::vector<std::pair<uint64_t, std::string>> found;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
    std::string name = entry.path().filename().string();
    std::optional<uint64_t> step = step_of(name);
    if (step && exists(root + "/" + name + "/" + kMetadataFile)) found.emplace_back(*step, root + "/" + name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (auto& [step, path] : found) paths.push_back(std::move(path));
  return paths;
}

// Whether the checkpoint at `path` may stand in for a diverged run's: its state was finite
// when saved (or not checked, as before checkpoints recorded it) and its metadata reads.
bool known_usable_and_finite(const std::string& path) {
  try {
    return ShardedCheckpoint(path).manifest().finite.value_or(true);
  } catch (const Error&) {
    return false;
  }
}

// Removes the checkpoints of steps after `step` (an abandoned run's: this one resumed from
// before them), then the oldest beyond `keep_last`, except, when the checkpoint just saved
// was not finite and no kept one is, the newest finite one: a diverged run never rotates
// away the last state it could be resumed from.
void prune(const std::string& root, int keep_last, const std::string& saved, uint64_t step, bool saved_finite) {
  std::vector<std::string> kept;
  for (const std::string& candidate : complete_checkpoints(root)) {
    if (*step_of(std::filesystem::path(candidate).filename().string()) > step) {
      io::remove_directory_durably(candidate);
    } else {
      kept.push_back(candidate);
    }
  }
  if (keep_last <= 0 || kept.size() <= static_cast<size_t>(keep_last)) return;
  const size_t first_kept = kept.size() - static_cast<size_t>(keep_last);
  std::optional<size_t> spared;
  if (!saved_finite) {
    bool finite_kept = false;
    for (size_t i = first_kept; i < kept.size() && !finite_kept; ++i) {
      finite_kept = kept[i] != saved && known_usable_and_finite(kept[i]);
    }
    for (size_t i = first_kept; !finite_kept && i-- > 0;) {
      if (known_usable_and_finite(kept[i])) {
        spared = i;
        break;
      }
    }
  }
  for (size_t i = 0; i < first_kept; ++i) {
    if (kept[i] != saved && spared != i) io::remove_directory_durably(kept[i]);
  }
}

// The collective part of a save, on the ranks of `group`: rank 0 clears the leftovers of
// crashed saves, every rank writes its file of `path` from `source`, then rank 0 moves
// `latest` to it and prunes. An error on any rank fails it on every rank.
void write_and_publish(const std::string& root, int keep_last, dist::ProcessGroup& group, const FlatSource& source,
                       const detail::WrittenRange& written, uint64_t step) {
  const std::string name = CheckpointManager::directory_name(step);
  const std::string path = root + "/" + name;
  const std::string what = "saving checkpoint '" + path + "'";
  detail::run_on_every_rank(group, what, [&] {
    if (group.rank() != 0) return std::string();
    filesystem_step(what, [&] {
      std::filesystem::create_directories(root);
      for (const auto& entry : std::filesystem::directory_iterator(root)) {
        if (is_leftover(entry.path().filename().string())) std::filesystem::remove_all(entry.path());
      }
    });
    return std::string();
  });
  detail::write_sharded_files(group, source, written, path);
  detail::run_on_every_rank(group, what, [&] {
    if (group.rank() != 0) return std::string();
    const std::string text = name + "\n";
    io::AtomicFile pointer(root + "/" + kLatest, io::AtomicFile::Mode::always_replace);  // our own file, whatever was put there
    pointer.write(text.data(), text.size());
    pointer.commit();
    prune(root, keep_last, path, step, source.manifest().finite.value_or(true));
    return std::string();
  });
}

// What this rank's part of the state holds, as a describe_on_every_rank result: "1" when
// finite, "0" when not (and allowed); a non-finite part refused throws.
std::string finiteness(const std::optional<std::string>& problem, bool allow_non_finite) {
  if (problem && !allow_non_finite) throw CheckpointError(*problem);
  return problem ? "0" : "1";
}

bool all_finite(const std::vector<std::string>& parts) {
  return std::all_of(parts.begin(), parts.end(), [](const std::string& part) { return part == "1"; });
}

}  // namespace

// Asynchronous saves: the staged copy (kept for the next save), its size for the memory
// report, the writers' groups, and the save in flight.
struct CheckpointManager::AsyncSave {
  std::shared_ptr<detail::StagedState> staged = std::make_shared<detail::StagedState>();
  std::shared_ptr<std::atomic<int64_t>> staged_bytes = std::make_shared<std::atomic<int64_t>>(0);
  // Listed among the CPU allocator's holders unless pinned (the pinned allocator is apart).
  std::shared_ptr<std::atomic<bool>> staged_pinned = std::make_shared<std::atomic<bool>>(false);
  MemoryHolderRegistration report;
  // Duplicates of the model's group and replica group: the background thread's
  // collectives must not share a group with training's (one thread at a time per group).
  std::shared_ptr<dist::ProcessGroup> writers, writer_replicas;
  dist::ProcessGroup* duplicated_from = nullptr;
  // The save in flight, and the model's groups on which poll() agrees it is done.
  std::future<void> in_flight;
  std::string path;
  dist::ProcessGroup* group = nullptr;
  dist::ProcessGroup* replicas = nullptr;

  explicit AsyncSave(const std::string& root)
      : report([bytes = staged_bytes, pinned = staged_pinned,
                what = "staged copy for asynchronous checkpoint saves to '" + root + "'"](Device device,
                                                                                      std::vector<MemoryHolder>& holders) {
          if (device.is_cpu() && !pinned->load() && bytes->load() > 0) holders.push_back({what, bytes->load()});
        }) {}
  ~AsyncSave() {
    if (!in_flight.valid()) return;
    try {
      in_flight.get();
    } catch (const std::exception& error) {  // a destructor must not throw; say it rather than lose it
      std::fprintf(stderr, "tessera::checkpoint: the asynchronous save of '%s' failed, and no wait() reported it: %s\n",
                   path.c_str(), error.what());
    }
  }
};

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

std::vector<std::string> CheckpointManager::checkpoints() const { return complete_checkpoints(root_); }

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
  if (options_.async_save) {
    wait();  // one save in flight at most; the previous one's failure is reported here
    start_async_save(model, with, training);
    return path;
  }
  // Hybrid sharding: the first replica writes (and holds the folder's lock), the others
  // wait for it (model_view.h).
  detail::on_first_replica(model, "saving checkpoint '" + path + "'", [&] { save_here(model, with, training); });
  return path;
}

void CheckpointManager::save_here(nn::Module& model, const Stateful& with, const TrainingState& training) {
  dist::ProcessGroup& group = fsdp::process_group(model);
  claim(group);
  const std::string what = "saving checkpoint '" + root_ + "/" + directory_name(training.step) + "'";
  const detail::ModelView view = detail::ModelView::of(model, with.optimizer);
  std::optional<detail::ModelSource> described;
  const std::vector<std::string> finite =
      detail::describe_on_every_rank(view, with, training, what, described, [&](detail::ModelSource& source) {
        return finiteness(detail::find_non_finite(source, group.rank()), options_.allow_non_finite);
      });
  described->record_finite(all_finite(finite));
  write_and_publish(root_, options_.keep_last, group, *described,
                    [&](size_t unit) { return described->written(unit); }, training.step);
}

void CheckpointManager::start_async_save(nn::Module& model, const Stateful& with, const TrainingState& training) {
  dist::ProcessGroup& group = fsdp::process_group(model);
  dist::ProcessGroup* replicas = fsdp::replica_group(model);
  const std::string path = root_ + "/" + directory_name(training.step);
  const std::string what = "saving checkpoint '" + path + "'";
  if (!async_) async_ = std::make_unique<AsyncSave>(root_);
  AsyncSave& async = *async_;
  if (async.duplicated_from != &group) {  // collective: every rank's first asynchronous save of this model
    try {
      async.writers = group.duplicate();
      async.writer_replicas = replicas != nullptr ? replicas->duplicate() : nullptr;
      async.duplicated_from = &group;
    } catch (const dist::DistError& error) {
      throw CheckpointError(tessera::detail::concat(what, ": asynchronous saves write beside training, on a group of "
                                                          "their own, which this job cannot make: ", error.what()));
    }
  }
  // Stage (training waits for this), on the ranks that write: the first replica's.
  detail::on_first_replica(replicas, what, [&] {
    claim(group);
    const detail::ModelView view = detail::ModelView::of(model, with.optimizer);
    std::optional<detail::ModelSource> described;
    const std::vector<std::string> finite =
        detail::describe_on_every_rank(view, with, training, what, described, [&](detail::ModelSource& source) {
          std::optional<std::string> problem = async.staged->stage(source, group.rank());
          async.staged_bytes->store(async.staged->bytes());
          async.staged_pinned->store(async.staged->pinned());
          return finiteness(problem, options_.allow_non_finite);
        });
    async.staged->record_finite(all_finite(finite));
  });
  // Write (training goes on): every rank's thread, so that all of them learn the outcome.
  const bool writes = replicas == nullptr || replicas->rank() == 0;
  async.path = path;
  async.group = &group;
  async.replicas = replicas;
  async.in_flight = std::async(std::launch::async, [root = root_, keep_last = options_.keep_last, step = training.step,
                                                    what, writers = async.writers, writer_replicas = async.writer_replicas,
                                                    staged = writes ? async.staged : nullptr] {
    detail::on_first_replica(writer_replicas.get(), what, [&] {
      write_and_publish(root, keep_last, *writers, *staged, [&](size_t unit) { return staged->written(unit); }, step);
    });
  });
}

void CheckpointManager::wait() {
  if (!async_ || !async_->in_flight.valid()) return;
  std::future<void> in_flight = std::move(async_->in_flight);
  try {
    in_flight.get();
  } catch (const std::exception& error) {
    throw CheckpointError(tessera::detail::concat("the asynchronous save of checkpoint '", async_->path,
                                                  "' failed: ", error.what()));
  }
}

bool CheckpointManager::poll() {
  if (!async_ || !async_->in_flight.valid()) return false;
  const bool mine = async_->in_flight.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  bool everyone = detail::true_on_every_rank(*async_->group, mine);
  if (async_->replicas != nullptr) everyone = detail::true_on_every_rank(*async_->replicas, everyone);
  if (!everyone) return true;
  wait();
  return false;
}

int64_t CheckpointManager::staging_bytes() const { return async_ ? async_->staged_bytes->load() : 0; }

std::optional<TrainingState> CheckpointManager::restore(nn::Module& model, const Stateful& with) {
  wait();
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
