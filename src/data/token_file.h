// llm.c's token files: a header of 256 little-endian int32 (magic 20240520, version 1, the
// token count, the rest zero), then the tokens as little-endian uint16. TokenFile maps one
// read-only into memory after checking the header against the file's length, so a
// truncated, overlong or foreign file is a DataError naming the file, the byte offset and
// what was expected there; write_token_file writes one (what build/tools/tessera-tokenize
// and llm.c's data scripts write).
//
//   ts::data::write_token_file("tiny.bin", std::vector<uint16_t>{50256, 31373, 995});
//   ts::data::TokenFile file("tiny.bin");
//   file.size();        // 3
//   file.tokens()[1];   // 31373
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>

namespace tessera::data {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr int64_t kTokenFileHeaderBytes = 256 * 4;
// The header's count is an int32.
inline constexpr int64_t kMaxTokensPerFile = INT32_MAX;

class TokenFile {
 public:
  explicit TokenFile(const std::filesystem::path& file);
  ~TokenFile();
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  std::span<const uint16_t> tokens() const { return {tokens_, static_cast<size_t>(size_)}; }
  int64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

  // DataError naming the first token >= vocab_size and its byte offset, if there is one.
  void check_below(int64_t vocab_size) const;

 private:
  void unmap() noexcept;

  std::filesystem::path path_;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  int64_t size_ = 0;
};

// Writes `tokens` as an llm.c token file, atomically (a temporary file beside it, fsynced
// and renamed). ValueError for more than kMaxTokensPerFile tokens; io::IOError when the
// file cannot be written.
void write_token_file(const std::filesystem::path& file, std::span<const uint16_t> tokens);

}  // namespace tessera::data
