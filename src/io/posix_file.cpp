#include "tessera/io/posix_file.h"

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <unistd.h>

namespace tessera::io {

// Linux transfers at most about 2 GiB per call; larger requests are split.
constexpr size_t max_chunk = size_t{1} << 30;

std::string os_error(int error) { return std::generic_category().message(error); }

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

int write_all(int fd, const void* data, size_t count) {
  const auto* bytes = static_cast<const char*>(data);
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
