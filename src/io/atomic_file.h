// A file written whole or not at all. What is at the target path decides how:
//
//   nothing, or a regular file    bytes go to a temporary file beside it; commit() fsyncs it,
//                                 renames it over the target and fsyncs the directory. Until
//                                 commit() succeeds the target is untouched; a destroyed,
//                                 uncommitted AtomicFile removes its temporary, so an error
//                                 anywhere in between leaves the previous file as it was.
//   a character device or a FIFO  written straight through (`--save /dev/null`, a pipe to
//                                 another program): renaming over it would replace the
//                                 machine's /dev/null with a regular file. A FIFO with no
//                                 reader is refused, since writing would wait for one forever.
//   anything else                 refused before anything is written: an IOError naming the
//                                 path and what it is ("is a directory").
//
// Mode::always_replace is for files a program names for itself inside its own folder (a
// checkpoint folder's `latest`): whatever is at the path is renamed over, as for a regular file.
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
  enum class Mode {
    output,          // a path the user named: the table above
    always_replace,  // a file of the program's own: temporary file and rename, whatever is there
  };

  // Checks the target and creates the temporary file (or opens the device or FIFO); IOError
  // naming the path and the OS error when that fails (for example because the directory
  // does not exist), or naming what the target is when it cannot be written.
  explicit AtomicFile(std::string target_path, Mode mode = Mode::output);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t count);
  void commit();

  const std::string& target_path() const { return target_path_; }
  // "" when writing straight through to a character device or FIFO.
  const std::string& temp_path() const { return temp_path_; }
  bool writes_through() const { return temp_path_.empty(); }

 private:
  [[noreturn]] void fail(const std::string& action, int error) const;
  void create_temporary();
  void open_stream(unsigned mode);

  std::string target_path_;
  std::string directory_;
  std::string temp_path_;
  FileDescriptor fd_;
  bool committed_ = false;
};

}  // namespace tessera::io
