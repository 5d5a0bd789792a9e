// Where a conversion may write (see output_folder.h).
#include "tessera/checkpoint/output_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <regex>
#include <vector>

#include "tessera/checkpoint/errors.h"
#include "tessera/checkpoint/output_folder_claim.h"
#include "tessera/checkpoint/sharded.h"
#include "tessera/io/errors.h"
#include "tessera/io/posix_file.h"

namespace tessera::checkpoint {

namespace {

namespace fs = std::filesystem;

// `path` with symbolic links, "." and ".." resolved, as far as it exists.
fs::path resolved(const std::string& path) {
  std::error_code error;
  fs::path absolute = fs::weakly_canonical(fs::absolute(path), error);
  if (error) throw io::IOError(tessera::detail::concat("cannot resolve the path '", path, "': ", error.message()));
  // weakly_canonical keeps a trailing separator ("ckpt/" -> ".../ckpt/"); compare without it.
  return absolute.has_filename() ? absolute : absolute.parent_path();
}

bool is_within(const fs::path& inner, const fs::path& outer) {
  return std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end()).first == outer.end();
}

// What write_sharded writes into a folder: its marker, metadata.json and rank files.
bool written_by_write_sharded(const std::string& name) {
  static const std::regex rank_file(R"(rank-[0-9]{5}-of-[0-9]{5}\.safetensors)");
  return name == kConvertedMarker || name == kMetadataFile || std::regex_match(name, rank_file);
}

}  // namespace

void check_output_apart(const std::string& output, const std::string& input) {
  const fs::path out = resolved(output), in = resolved(input);
  const std::string named =
      tessera::detail::concat("'", output, "'", out.string() == output ? "" : " (" + out.string() + ")");
  TS_CHECK(out != in, ValueError, "the output ", named, " is the input '", input,
           "': writing it would replace the input");
  TS_CHECK(!is_within(out, in), ValueError, "the output ", named, " lies inside the input '", input,
           "': write it somewhere else");
  TS_CHECK(!is_within(in, out), ValueError, "the output ", named, " contains the input '", input,
           "': writing it would remove the input");
}

namespace detail {

OutputFolderClaim::OutputFolderClaim(const std::string& directory) : path_(resolved(directory).string()) {
  struct stat info {};
  if (::lstat(path_.c_str(), &info) != 0) {
    if (errno != ENOENT) {
      int error = errno;
      throw io::IOError(tessera::detail::concat("cannot stat '", path_, "': ", io::os_error(error)));
    }
  } else if (!S_ISDIR(info.st_mode)) {
    throw CheckpointError(tessera::detail::concat("'", directory, "' is ", io::file_type_name(info.st_mode),
                                                  ", not a folder: a sharded checkpoint is a folder, and this one "
                                                  "would replace it. Name a new folder"));
  } else {
    exists_ = true;
    std::vector<std::string> others;
    bool marked = false;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(path_, error)) {
      const std::string name = entry.path().filename().string();
      empty_ = false;
      if (name == kConvertedMarker) marked = true;
      if (!written_by_write_sharded(name)) others.push_back(name);
    }
    if (error) throw io::IOError(tessera::detail::concat("cannot list the folder '", path_, "': ", error.message()));
    if (!empty_ && (!marked || !others.empty())) {
      std::sort(others.begin(), others.end());
      std::string listed;
      for (size_t i = 0; i < others.size() && i < 3; ++i) listed += (i == 0 ? "'" : ", '") + others[i] + "'";
      if (others.size() > 3) listed += tessera::detail::concat(" and ", others.size() - 3, " more");
      std::string why = others.empty() ? "a sharded checkpoint that tessera-checkpoint did not write (no " +
                                             std::string(kConvertedMarker) + ")"
                                       : "files tessera-checkpoint did not write: " + listed;
      if (std::string holder = current_lock_holder(path_ + "/.lock"); !holder.empty()) {
        why += " (it is the checkpoint folder of a running job: " + holder + ")";
      }
      throw CheckpointError(tessera::detail::concat("the folder '", directory, "' holds ", why,
                                                    "; a conversion writes only into a new or empty folder, or one "
                                                    "it wrote before, and removes nothing else. Name a new folder"));
    }
  }
  // Beside a running job's checkpoints: write under the folder's lock, or not at all.
  const std::string parent = fs::path(path_).parent_path().string();
  if (::lstat((parent + "/.lock").c_str(), &info) == 0) parent_lock_ = std::make_unique<FolderLock>(parent);
}

}  // namespace detail

}  // namespace tessera::checkpoint
