#include "tessera/io/durable.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>

#include "tessera/io/errors.h"
#include "tessera/io/posix_file.h"

namespace tessera::io {

namespace {

[[noreturn]] void fail(const std::string& action, int error) {
  throw IOError(detail::concat(action, ": ", os_error(error)));
}

std::string base_name(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  size_t slash = trimmed.find_last_of('/');
  return slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
}

std::atomic<uint64_t> aside_counter{0};

std::string aside_name(const std::string& path, const char* purpose) {
  return parent_directory(path) + "/." + base_name(path) + "." + purpose + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(aside_counter.fetch_add(1));
}

void remove_all_or_throw(const std::string& path) {
  std::error_code error;
  std::filesystem::remove_all(path, error);
  if (error) throw IOError(detail::concat("cannot remove '", path, "': ", error.message()));
}

}  // namespace

void fsync_path(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) fail("cannot open '" + path + "' to fsync it", errno);
  if (::fsync(fd.get()) != 0 && errno != EINVAL) fail("cannot fsync '" + path + "'", errno);
}

std::string parent_directory(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  size_t slash = trimmed.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return trimmed.substr(0, slash);
}

void replace_directory(const std::string& from, const std::string& to) {
  struct stat info {};
  bool exists = ::lstat(to.c_str(), &info) == 0;
  if (!exists) {
    if (::rename(from.c_str(), to.c_str()) != 0) fail("cannot rename '" + from + "' to '" + to + "'", errno);
  } else if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    // `from` now holds the old contents.
    fsync_path(parent_directory(to));
    remove_all_or_throw(from);
  } else if (errno == EINVAL || errno == ENOSYS) {
    std::string aside = aside_name(to, "old");
    if (::rename(to.c_str(), aside.c_str()) != 0) fail("cannot move '" + to + "' aside to '" + aside + "'", errno);
    if (::rename(from.c_str(), to.c_str()) != 0) fail("cannot rename '" + from + "' to '" + to + "'", errno);
    fsync_path(parent_directory(to));
    remove_all_or_throw(aside);
  } else {
    fail("cannot exchange '" + from + "' with '" + to + "'", errno);
  }
  fsync_path(parent_directory(to));
  if (parent_directory(from) != parent_directory(to)) fsync_path(parent_directory(from));
}

void remove_directory_durably(const std::string& path) {
  std::string aside = aside_name(path, "deleting");
  if (::rename(path.c_str(), aside.c_str()) != 0) {
    if (errno == ENOENT) return;
    fail("cannot move '" + path + "' aside to remove it", errno);
  }
  fsync_path(parent_directory(path));
  remove_all_or_throw(aside);
}

}  // namespace tessera::io
