// The header is read field by field so that each error names its field's offset; the
// tokens are read on demand with pread (the header comment says why not mmap).
#include "tessera/data/token_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "tessera/data/error.h"
#include "tessera/io/atomic_file.h"
#include "tessera/tensor/error.h"

namespace tessera::data {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and read as they are: a big-endian host would need a byte swap");

namespace {

template <class... Parts>
[[noreturn]] void fail(const std::filesystem::path& file, int64_t offset, const Parts&... parts) {
  throw DataError(detail::concat("token file '", file.string(), "': at byte offset ", offset, ": ", parts...));
}

int32_t load_int32(const uint8_t* bytes) {
  int32_t value;
  std::memcpy(&value, bytes, sizeof value);
  return value;
}

}  // namespace

TokenFile::TokenFile(const std::filesystem::path& file) : path_(file) {
  uint64_t size = 0;
  try {
    fd_ = io::open_regular_file(file.string(), &size);
  } catch (const io::IOError& e) {
    throw DataError(detail::concat("token file '", file.string(), "': ", e.what()));
  }
  const auto file_bytes = static_cast<int64_t>(size);

  uint8_t header[12];
  const int64_t got = io::pread_full(fd_.get(), header, sizeof header, 0);
  if (got < 0) fail(file, 0, "read error: ", io::os_error(static_cast<int>(-got)));
  if (got < 4)
    fail(file, got, "the file ends inside the header: expected the magic number ", kTokenFileMagic, " at bytes 0..3");
  if (load_int32(header) != kTokenFileMagic) {
    fail(file, 0, "expected the magic number ", kTokenFileMagic, " of an llm.c token file, found ", load_int32(header),
         " (not a token file)");
  }
  if (got < 8) fail(file, got, "the file ends inside the header: expected the version at bytes 4..7");
  if (load_int32(header + 4) != kTokenFileVersion) {
    fail(file, 4, "expected version ", kTokenFileVersion, " (uint16 tokens), found ", load_int32(header + 4));
  }
  if (got < 12) fail(file, got, "the file ends inside the header: expected the token count at bytes 8..11");
  const int32_t count = load_int32(header + 8);
  if (count < 0) fail(file, 8, "expected a token count >= 0, found ", count);
  if (file_bytes < kTokenFileHeaderBytes) {
    fail(file, file_bytes, "the file ends inside the header: expected ", kTokenFileHeaderBytes, " header bytes, found ",
         file_bytes);
  }
  const int64_t payload = file_bytes - kTokenFileHeaderBytes, promised = 2 * int64_t{count};
  const std::string promise =
      detail::concat("the header's token count ", count, " promises ", promised, " bytes of tokens at offsets [",
                     kTokenFileHeaderBytes, ", ", kTokenFileHeaderBytes + promised, ")");
  if (payload < promised) fail(file, file_bytes, "the file ends inside the tokens: ", promise, ", found ", payload);
  if (payload > promised) {
    fail(file, kTokenFileHeaderBytes + promised, "expected the end of the file after the tokens (", promise,
         "), found ", payload - promised, " more bytes");
  }
  size_ = count;
}

void TokenFile::read(int64_t first, std::span<uint16_t> out) const {
  const auto count = static_cast<int64_t>(out.size());
  TS_CHECK(first >= 0 && count <= size_ && first <= size_ - count, IndexError, "token file '", path_.string(),
           "': tokens [", first, ", ", first + count, ") are out of range for its ", size_, " tokens");
  const int64_t offset = kTokenFileHeaderBytes + 2 * first;
  const int64_t got = io::pread_full(fd_.get(), out.data(), out.size_bytes(), static_cast<uint64_t>(offset));
  if (got < 0) fail(path_, offset, "read error: ", io::os_error(static_cast<int>(-got)));
  if (got < static_cast<int64_t>(out.size_bytes())) {
    struct stat now {};
    const std::string now_bytes = ::fstat(fd_.get(), &now) == 0 ? detail::concat(now.st_size, " bytes") : "shorter";
    fail(path_, offset + got, "expected ", static_cast<int64_t>(out.size_bytes()) - got,
         " more bytes of tokens, but the file is now ", now_bytes, " (", kTokenFileHeaderBytes + 2 * size_,
         " when it was opened): it was truncated while in use");
  }
}

std::vector<uint16_t> TokenFile::read_all() const {
  std::vector<uint16_t> tokens(static_cast<size_t>(size_));
  read(0, tokens);
  return tokens;
}

void TokenFile::check_below(int64_t vocab_size) const {
  std::vector<uint16_t> chunk;
  constexpr int64_t kChunkTokens = int64_t{1} << 20;  // 2 MiB at a time
  for (int64_t first = 0; first < size_; first += kChunkTokens) {
    chunk.resize(static_cast<size_t>(std::min(kChunkTokens, size_ - first)));
    read(first, chunk);
    for (size_t j = 0; j < chunk.size(); ++j) {
      if (chunk[j] >= vocab_size) {
        const int64_t i = first + static_cast<int64_t>(j);
        fail(path_, kTokenFileHeaderBytes + 2 * i, "token ", chunk[j], " (number ", i,
             ") is not below the vocabulary size ", vocab_size);
      }
    }
  }
}

void write_token_file(const std::filesystem::path& file, std::span<const uint16_t> tokens) {
  TS_CHECK(static_cast<int64_t>(tokens.size()) <= kMaxTokensPerFile, ValueError, "write_token_file('", file.string(),
           "'): ", tokens.size(), " tokens is more than the header's int32 count can hold (", kMaxTokensPerFile,
           "): split them into several files");
  int32_t header[kTokenFileHeaderBytes / 4] = {};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  io::AtomicFile out(file.string());
  out.write(header, sizeof header);
  out.write(tokens.data(), tokens.size_bytes());
  out.commit();
}

}  // namespace tessera::data
