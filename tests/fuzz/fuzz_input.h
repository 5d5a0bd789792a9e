// libFuzzer targets read their input as a file, as the loaders do: the bytes go to an
// in-memory file (memfd) reached through /proc/self/fd, so no disk is touched per input.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace fuzz {

// The path of a file holding exactly `data`; valid until the next call.
inline std::string as_file(const uint8_t* data, size_t size) {
  static const int fd = ::memfd_create("tessera-fuzz-input", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, 0) != 0) __builtin_trap();
  for (size_t written = 0; written < size;) {
    ssize_t n = ::pwrite(fd, data + written, size - written, static_cast<off_t>(written));
    if (n <= 0) __builtin_trap();
    written += static_cast<size_t>(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

}  // namespace fuzz
