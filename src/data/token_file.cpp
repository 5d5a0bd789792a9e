// The header is read field by field so that each error names its field's offset; the
// tokens are then mapped, not read: a data set of billions of tokens costs no memory of its
// own, and the page cache shares it between the ranks of one machine.
#include "tessera/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include "tessera/data/error.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/posix_file.h"

namespace tessera::data {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and mapped as they are: a big-endian host would need a byte swap");

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
  io::FileDescriptor fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    throw DataError(detail::concat("token file '", file.string(), "': cannot open it: ", io::os_error(errno)));
  }
  struct stat status {};
  if (::fstat(fd.get(), &status) != 0) {
    throw DataError(detail::concat("token file '", file.string(), "': cannot stat it: ", io::os_error(errno)));
  }
  if (!S_ISREG(status.st_mode))
    throw DataError(detail::concat("token file '", file.string(), "': is not a regular file"));
  const auto file_bytes = static_cast<int64_t>(status.st_size);

  uint8_t header[12];
  const int64_t got = io::pread_full(fd.get(), header, sizeof header, 0);
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

  mapping_bytes_ = static_cast<size_t>(file_bytes);
  mapping_ = ::mmap(nullptr, mapping_bytes_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (mapping_ == MAP_FAILED) {
    mapping_ = nullptr;
    throw DataError(detail::concat("token file '", file.string(), "': cannot map its ", file_bytes,
                                   " bytes into memory: ", io::os_error(errno)));
  }
  tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(mapping_) + kTokenFileHeaderBytes);
  size_ = count;
}

void TokenFile::unmap() noexcept {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
  tokens_ = nullptr;
  size_ = 0;
}

TokenFile::~TokenFile() { unmap(); }

TokenFile::TokenFile(TokenFile&& other) noexcept
    : path_(std::move(other.path_)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_bytes_(std::exchange(other.mapping_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void TokenFile::check_below(int64_t vocab_size) const {
  for (int64_t i = 0; i < size_; ++i) {
    if (tokens_[i] >= vocab_size) {
      fail(path_, kTokenFileHeaderBytes + 2 * i, "token ", tokens_[i], " (number ", i,
           ") is not below the vocabulary size ", vocab_size);
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
