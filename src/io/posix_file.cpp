#include "tessera/io/posix_file.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "tessera/io/errors.h"

namespace tessera::io {

// Linux transfers at most about 2 GiB per call; larger requests are split.
constexpr size_t max_chunk = size_t{1} << 30;

namespace {

// The process's file size limit (ulimit -f), or 0 when there is none.
uint64_t file_size_limit() {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_FSIZE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
  return static_cast<uint64_t>(limit.rlim_cur);
}

}  // namespace

std::string os_error(int error) {
  std::string text = std::generic_category().message(error);
  if (error == EFBIG) {
    if (uint64_t limit = file_size_limit()) {
      text += detail::concat(" (this process may write files of at most ", limit, " bytes: ulimit -f)");
    }
  }
  return text;
}

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = other.release();
  }
  return *this;
}

void FileDescriptor::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int FileDescriptor::close_checked() {
  if (fd_ < 0) return 0;
  int result = ::close(release());
  // After EINTR the descriptor is closed on Linux; the data may still be written later,
  // which the fsync before close already made sure of.
  return (result == 0 || errno == EINTR) ? 0 : errno;
}

std::string file_type_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFLNK: return "a symbolic link";
  }
  return "not a regular file";
}

FileDescriptor open_regular_file(const std::string& path, uint64_t* size) {
  auto refuse = [&](unsigned mode) {
    throw IOError(detail::concat("cannot read '", path, "': it is ", file_type_name(mode), ", not a regular file"));
  };
  // stat first: opening a device can act (a tape rewinds, a watchdog arms), and a FIFO
  // would wait for a writer forever.
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    int error = errno;
    throw IOError(detail::concat("cannot open '", path, "': ", os_error(error)));
  }
  if (!S_ISREG(info.st_mode)) refuse(info.st_mode);
  // O_NONBLOCK, and the type checked again on the open file: the path may have been
  // replaced by a FIFO in between. It changes nothing for regular files, whose reads never block.
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) {
    int error = errno;
    throw IOError(detail::concat("cannot open '", path, "': ", os_error(error)));
  }
  if (::fstat(fd.get(), &info) != 0) {
    int error = errno;
    throw IOError(detail::concat("cannot stat '", path, "': ", os_error(error)));
  }
  if (!S_ISREG(info.st_mode)) refuse(info.st_mode);
  if (size != nullptr) *size = static_cast<uint64_t>(info.st_size);
  return fd;
}

std::string read_regular_file(const std::string& path, uint64_t max_bytes, const std::string& limit_for) {
  uint64_t size = 0;
  FileDescriptor fd = open_regular_file(path, &size);
  if (size > max_bytes) {
    throw FormatError(detail::concat(path, ": byte 0: the file is ", size, " bytes, over the ", max_bytes,
                                     "-byte limit for ", limit_for.empty() ? "it" : limit_for));
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  const int64_t got = pread_full(fd.get(), bytes.data(), bytes.size(), 0);
  if (got < 0) throw IOError(detail::concat("cannot read '", path, "': ", os_error(static_cast<int>(-got))));
  bytes.resize(static_cast<size_t>(got));  // shorter if it was truncated meanwhile
  return bytes;
}

int write_all(int fd, const void* data, size_t count) {
  const auto* bytes = static_cast<const char*>(data);
  // A write past the file size limit raises SIGXFSZ, which kills the process without a word:
  // write up to the limit, then fail with EFBIG as the kernel would with SIGXFSZ ignored.
  if (const uint64_t limit = file_size_limit(); limit > 0 && count > 0) {
    const off_t position = ::lseek(fd, 0, SEEK_CUR);
    if (position >= 0 && static_cast<uint64_t>(position) + count > limit) {
      const uint64_t room = limit > static_cast<uint64_t>(position) ? limit - static_cast<uint64_t>(position) : 0;
      if (int error = write_all(fd, bytes, static_cast<size_t>(room)); error != 0) return error;
      return EFBIG;
    }
  }
  while (count > 0) {
    ssize_t written = ::write(fd, bytes, std::min(count, max_chunk));
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes += written;
    count -= static_cast<size_t>(written);
  }
  return 0;
}

int64_t pread_full(int fd, void* out, size_t count, uint64_t offset) {
  auto* bytes = static_cast<char*>(out);
  size_t done = 0;
  while (done < count) {
    ssize_t got = ::pread(fd, bytes + done, std::min(count - done, max_chunk), static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return static_cast<int64_t>(done);
}

}  // namespace tessera::io
