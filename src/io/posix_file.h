// Thin, checked wrappers over POSIX file calls: an owning file descriptor, whole writes and
// positioned reads that retry on EINTR and short counts, and the OS error text for messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera::io {

// strerror(error), without strerror's shared buffer; for EFBIG also the process's file
// size limit (ulimit -f) when it has one.
std::string os_error(int error);

class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() { reset(); }
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closes, ignoring errors (for cleanup paths); close_checked() reports them.
  void reset();
  // 0 or the errno of close().
  int close_checked();

 private:
  int fd_ = -1;
};

// Opens `path` (following symbolic links) for reading if it is a regular file, without
// ever blocking: a FIFO, a device or a directory is refused with an IOError naming the
// path and what it is ("is a FIFO (named pipe), not a regular file"), found with stat
// before it is opened (opening a device can act). `size`, when given, receives the file's size.
FileDescriptor open_regular_file(const std::string& path, uint64_t* size = nullptr);
// The whole of the regular file `path` (open_regular_file's refusals), read with pread. A
// file over `max_bytes` is refused unread: a FormatError "<path>: byte 0: the file is N
// bytes, over the M-byte limit for <limit_for>".
//
//   std::string text = io::read_regular_file("data/gpt2/vocab.bpe", 64 << 20, "a GPT-2 merges file");
std::string read_regular_file(const std::string& path, uint64_t max_bytes = UINT64_MAX,
                              const std::string& limit_for = "");
// "a directory", "a FIFO (named pipe)", "a socket", ... for a stat st_mode.
std::string file_type_name(unsigned mode);

// Writes all `count` bytes; returns 0 or the errno of the failing write. Bytes that would
// pass the process's file size limit (ulimit -f) are not written: EFBIG instead of the
// SIGXFSZ that would kill the process with no message.
int write_all(int fd, const void* data, size_t count);
// Reads up to `count` bytes at `offset`, stopping early only at the end of the file.
// Returns the bytes read, or -errno.
int64_t pread_full(int fd, void* out, size_t count, uint64_t offset);

}  // namespace tessera::io
