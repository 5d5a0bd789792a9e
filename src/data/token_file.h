// llm.c's token files: a header of 256 little-endian int32 (magic 20240520, version 1, the
// token count, the rest zero), then the tokens as little-endian uint16. TokenFile opens one
// (a FIFO, device or folder is refused before anything is read, never waited on) and checks
// the header against the file's length, so a truncated, overlong or foreign file is a
// DataError naming the file, the byte offset and what was expected there; write_token_file
// writes one (what build/tools/tessera-tokenize and llm.c's data scripts write).
//
// Tokens are read with pread, as llm.c's loader freads them, not through a memory mapping:
// a file truncated while in use is then a DataError naming it and the offset, where a
// mapping would kill the process with SIGBUS. The page cache still shares the file between
// the ranks of one machine, and the process holds no copy of it.
//
//   ts::data::write_token_file("tiny.bin", std::vector<uint16_t>{50256, 31373, 995});
//   ts::data::TokenFile file("tiny.bin");
//   file.size();           // 3
//   file.read_all()[1];    // 31373
//   uint16_t two[2];
//   file.read(1, two);     // {31373, 995}
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "tessera/io/posix_file.h"

namespace tessera::data {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr int64_t kTokenFileHeaderBytes = 256 * 4;
// The header's count is an int32.
inline constexpr int64_t kMaxTokensPerFile = INT32_MAX;

class TokenFile {
 public:
  explicit TokenFile(const std::filesystem::path& file);

  int64_t size() const { return size_; }  // tokens
  const std::filesystem::path& path() const { return path_; }

  // Tokens [first, first + out.size()) into `out`. IndexError for a range past size();
  // DataError naming the file and the offset when the file no longer holds them (it was
  // truncated since it was opened). Safe to call from several threads at once.
  void read(int64_t first, std::span<uint16_t> out) const;
  std::vector<uint16_t> read_all() const;

  // DataError naming the first token >= vocab_size and its byte offset, if there is one.
  void check_below(int64_t vocab_size) const;

 private:
  std::filesystem::path path_;
  io::FileDescriptor fd_;
  int64_t size_ = 0;
};

// Writes `tokens` as an llm.c token file, atomically (a temporary file beside it, fsynced
// and renamed). ValueError for more than kMaxTokensPerFile tokens; io::IOError when the
// file cannot be written.
void write_token_file(const std::filesystem::path& file, std::span<const uint16_t> tokens);

}  // namespace tessera::data
