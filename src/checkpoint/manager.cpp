#include "tessera/checkpoint/manager.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "tessera/checkpoint/collective.h"
#include "tessera/checkpoint/full.h"
#include "tessera/checkpoint/model_view.h"
#include "tessera/fsdp/state.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/durable.h"

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
  std::ifstream in(pointer, std::ios::binary);
  if (!in) {
    if (!exists(pointer)) return std::nullopt;
    throw io::IOError(tessera::detail::concat("cannot read '", pointer, "'"));
  }
  std::string text;
  text.resize(64);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
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
  return path;
}

std::string CheckpointManager::save(nn::Module& model, const Stateful& with, const TrainingState& training) {
  const std::string path = root_ + "/" + directory_name(training.step);
  // Hybrid sharding: the first replica writes, the others wait for it (model_view.h).
  detail::on_first_replica(model, "saving checkpoint '" + path + "'", [&] { save_here(model, with, training); });
  return path;
}

void CheckpointManager::save_here(nn::Module& model, const Stateful& with, const TrainingState& training) {
  dist::ProcessGroup& group = fsdp::detail::state_of(model).group();
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

std::optional<TrainingState> CheckpointManager::restore(nn::Module& model, const Stateful& with) const {
  std::optional<std::string> path = latest();
  if (!path) return std::nullopt;
  return load_sharded(*path, model, with);
}

std::string resolve(const std::string& path) {
  if (!is_directory(path) || exists(path + "/" + kMetadataFile)) return path;
  std::optional<std::string> latest = CheckpointManager(path).latest();
  TS_CHECK(latest.has_value(), io::IOError, "'", path, "' holds no checkpoint: neither ", kMetadataFile,
           " (a sharded checkpoint) nor '", kLatest, "' (a folder of checkpoints)");
  return *latest;
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
