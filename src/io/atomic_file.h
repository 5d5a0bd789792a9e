// A file replaced atomically: bytes go to a temporary file beside the target, and commit()
// fsyncs it, renames it over the target and fsyncs the directory. Until commit() succeeds
// the target is untouched; a destroyed, uncommitted AtomicFile removes its temporary, so
// an error or exception anywhere in between leaves the previous file as it was.
//
//   io::AtomicFile file("model.safetensors");
//   file.write(header.data(), header.size());
//   file.commit();
#pragma once

#include <cstddef>
#include <string>

#include "tessera/io/posix_file.h"

namespace tessera::io {

class AtomicFile {
 public:
  // Creates the temporary file; IOError naming it and the OS error when that fails (for
  // example because the directory does not exist).
  explicit AtomicFile(std::string target_path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t count);
  void commit();

  const std::string& target_path() const { return target_path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  [[noreturn]] void fail(const std::string& action, int error) const;

  std::string target_path_;
  std::string directory_;
  std::string temp_path_;
  FileDescriptor fd_;
  bool committed_ = false;
};

}  // namespace tessera::io
