#include "tessera/io/atomic_file.h"

#include <atomic>
#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tessera/io/errors.h"

namespace tessera::io {

namespace {

std::string directory_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_name_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Makes temporary names unique among the saves of one process; the pid separates processes.
std::atomic<uint64_t> temp_counter{0};

}  // namespace

AtomicFile::AtomicFile(std::string target_path, Mode mode)
    : target_path_(std::move(target_path)), directory_(directory_of(target_path_)) {
  if (target_path_.empty() || target_path_.back() == '/') {
    throw IOError(detail::concat("cannot save to '", target_path_, "': not a file name"));
  }
  struct stat info {};
  if (mode == Mode::always_replace || ::stat(target_path_.c_str(), &info) != 0) {
    if (mode == Mode::output && errno != ENOENT) fail("cannot stat it", errno);
    create_temporary();
  } else if (S_ISREG(info.st_mode)) {
    create_temporary();
  } else if (S_ISCHR(info.st_mode) || S_ISFIFO(info.st_mode)) {
    open_stream(info.st_mode);
  } else {
    throw IOError(detail::concat("cannot save to '", target_path_, "': it is ", file_type_name(info.st_mode),
                                 "; a save writes a regular file (replaced atomically), a new file, a character "
                                 "device or a FIFO"));
  }
}

void AtomicFile::create_temporary() {
  std::string prefix = directory_ + "/." + base_name_of(target_path_) + ".tmp-" + std::to_string(::getpid()) + "-";
  for (int attempt = 0;; ++attempt) {
    temp_path_ = prefix + std::to_string(temp_counter.fetch_add(1));
    // 0666 less the umask: the file ends up with the permissions any new file would get.
    int fd = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      fd_ = FileDescriptor(fd);
      return;
    }
    if (errno != EEXIST || attempt == 100) {
      int error = errno;
      throw IOError(detail::concat("cannot save '", target_path_, "': cannot create the temporary file '",
                                   temp_path_, "': ", os_error(error)));
    }
  }
}

void AtomicFile::open_stream(unsigned mode) {
  // O_NONBLOCK: opening a FIFO for writing would otherwise wait for a reader forever.
  fd_ = FileDescriptor(::open(target_path_.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd_.valid()) {
    if (errno == ENXIO && S_ISFIFO(mode)) {
      throw IOError(detail::concat("cannot save to '", target_path_,
                                   "': it is a FIFO (named pipe) that no program reads: start the reader first"));
    }
    fail("cannot open it for writing", errno);
  }
  struct stat info {};
  if (::fstat(fd_.get(), &info) != 0) fail("cannot stat it", errno);
  if (!S_ISCHR(info.st_mode) && !S_ISFIFO(info.st_mode)) {
    throw IOError(detail::concat("cannot save to '", target_path_, "': it was ", file_type_name(mode),
                                 " and became ", file_type_name(info.st_mode), " while it was opened"));
  }
  // The writes themselves may wait, for a reader that is slower than this program.
  const int flags = ::fcntl(fd_.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd_.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) fail("cannot make its writes blocking", errno);
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  fd_.reset();
  if (!writes_through()) ::unlink(temp_path_.c_str());
}

void AtomicFile::fail(const std::string& action, int error) const {
  throw IOError(detail::concat("cannot save '", target_path_, "': ", action, ": ", os_error(error)));
}

void AtomicFile::write(const void* data, size_t count) {
  if (int error = write_all(fd_.get(), data, count)) {
    fail(writes_through() ? std::string("cannot write it") : "cannot write '" + temp_path_ + "'", error);
  }
}

void AtomicFile::commit() {
  if (writes_through()) {
    // A device or a pipe: nothing to rename, and fsync means nothing to most of them.
    if (int error = fd_.close_checked()) fail("cannot close it", error);
    committed_ = true;
    return;
  }
  if (::fsync(fd_.get()) != 0) fail("cannot fsync '" + temp_path_ + "'", errno);
  if (int error = fd_.close_checked()) fail("cannot close '" + temp_path_ + "'", error);
  if (::rename(temp_path_.c_str(), target_path_.c_str()) != 0) {
    fail("cannot rename '" + temp_path_ + "' to it", errno);
  }
  committed_ = true;
  // The rename is durable only once the directory entry is on disk.
  FileDescriptor directory(::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!directory.valid()) fail("saved, but cannot open its directory '" + directory_ + "' to fsync it", errno);
  // Some file systems cannot fsync a directory (EINVAL); the rename stands regardless.
  if (::fsync(directory.get()) != 0 && errno != EINVAL) {
    fail("saved, but cannot fsync its directory '" + directory_ + "'", errno);
  }
}

}  // namespace tessera::io
