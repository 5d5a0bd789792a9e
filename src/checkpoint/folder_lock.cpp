// The checkpoint folder's lock file (see folder_lock.h).
#include "tessera/checkpoint/folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "tessera/checkpoint/errors.h"
#include "tessera/io/errors.h"

namespace tessera::checkpoint::detail {

namespace {

// The program and its arguments from /proc/self/cmdline, at most ~200 characters.
std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && text.back() == '\0') text.pop_back();
  for (char& c : text) {
    if (c == '\0') c = ' ';
    if (c == '\n') c = ' ';
  }
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  return text.empty() ? "(unknown command)" : text;
}

// The holder's line in an open lock file, or "holder unknown".
std::string holder_written_in(int fd) {
  std::string holder(512, '\0');
  int64_t got = io::pread_full(fd, holder.data(), holder.size(), 0);
  holder.resize(got > 0 ? static_cast<size_t>(got) : 0);
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
  return holder.empty() ? "holder unknown" : holder;
}

}  // namespace

std::string current_lock_holder(const std::string& path) {
  io::FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd.valid() || ::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) return "";
  return holder_written_in(fd.get());
}

std::string lock_holder_line() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char since[32] = {0};
  std::strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S UTC", &utc);
  return tessera::detail::concat("pid ", ::getpid(), " on host '", host, "' since ", since, ": ", command_line());
}

FolderLock::FolderLock(const std::string& root) : path_(root + "/.lock") {
  try {
    std::filesystem::create_directories(root);
  } catch (const std::filesystem::filesystem_error& error) {
    throw io::IOError(tessera::detail::concat("cannot create the checkpoint folder '", root, "': ", error.what()));
  }
  // O_NOFOLLOW and O_NONBLOCK: a symbolic link or a FIFO planted as .lock is refused, not followed or waited on.
  fd_ = io::FileDescriptor(::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0666));
  if (!fd_.valid()) {
    int error = errno;
    throw io::IOError(tessera::detail::concat("cannot open the lock file '", path_, "': ", io::os_error(error)));
  }
  struct stat info {};
  if (::fstat(fd_.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
    throw io::IOError(tessera::detail::concat("the lock file '", path_, "' is ", io::file_type_name(info.st_mode),
                                              ", not a regular file"));
  }
  if (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    int error = errno;
    if (error != EWOULDBLOCK) {
      throw io::IOError(tessera::detail::concat("cannot lock '", path_, "': ", io::os_error(error)));
    }
    throw CheckpointError(tessera::detail::concat(
        "the checkpoint folder '", root, "' is in use by another job (", holder_written_in(fd_.get()),
        " holds ", path_, "); two jobs writing one folder would overwrite and prune each other's checkpoints. Use "
        "another folder, or wait for that job to end"));
  }
  const std::string line = lock_holder_line() + "\n";
  // Best effort: the lock holds even if the note cannot be written.
  if (::ftruncate(fd_.get(), 0) == 0) (void)io::write_all(fd_.get(), line.data(), line.size());
}

}  // namespace tessera::checkpoint::detail
