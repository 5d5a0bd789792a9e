// Files that are not regular files, made inside a test's TempDir (never under /dev): a
// character device with /dev/null's numbers, a FIFO and a reader that collects what is
// written to it, a block device, a socket. Making device nodes needs root (mknod);
// make_device says when it could not.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <future>
#include <string>

namespace test_support {

// A device node at `path` (S_IFCHR or S_IFBLK) with the given numbers; false when mknod is
// not allowed here (not root).
inline bool make_device(const std::string& path, mode_t type, unsigned major, unsigned minor) {
  return ::mknod(path.c_str(), type | 0666, ::makedev(major, minor)) == 0;
}

// /dev/null's numbers (1, 3): writes vanish, reads end at once.
inline bool make_null_device(const std::string& path) { return make_device(path, S_IFCHR, 1, 3); }

// Still a character device with /dev/null's numbers?
inline bool is_null_device(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0 && S_ISCHR(info.st_mode) && info.st_rdev == ::makedev(1, 3);
}

inline bool make_fifo(const std::string& path) { return ::mkfifo(path.c_str(), 0666) == 0; }

// A listening Unix socket bound at `path` (the file stays after the descriptor is closed).
inline bool make_socket_file(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return bound;
}

// Reads everything written into the FIFO at `path`. It is opened at construction, so a
// writer started afterwards finds a reader; bytes() waits (at most `seconds`) until the
// writer closes it, and returns what was written.
class FifoReader {
 public:
  explicit FifoReader(const std::string& path, int seconds = 60)
      : fd_(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)) {
    collected_ = std::async(std::launch::async, [this, seconds] { return collect(seconds); });
  }
  ~FifoReader() {
    if (collected_.valid()) collected_.wait();
    if (fd_ >= 0) ::close(fd_);
  }
  FifoReader(const FifoReader&) = delete;
  FifoReader& operator=(const FifoReader&) = delete;

  bool opened() const { return fd_ >= 0; }
  std::string bytes() { return collected_.get(); }

 private:
  // Linux reports POLLHUP on a FIFO's read end only once a writer has come and gone, so
  // this waits for the writer, however late it opens.
  std::string collect(int seconds) {
    std::string bytes;
    if (fd_ < 0) return bytes;
    pollfd wanted{fd_, POLLIN, 0};
    while (::poll(&wanted, 1, seconds * 1000) > 0) {
      char buffer[65536];
      const ssize_t got = ::read(fd_, buffer, sizeof buffer);
      if (got > 0) {
        bytes.append(buffer, static_cast<size_t>(got));
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        break;  // the writer closed it
      }
    }
    return bytes;
  }

  int fd_;
  std::future<std::string> collected_;
};

}  // namespace test_support
