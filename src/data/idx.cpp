// IDX reader. The header is read field by field so that a file cut short names the field
// it ends in; the payload length the header promises is computed with overflow checks and
// must equal what follows exactly. A raw file's length is known before anything is
// allocated; a gzip stream's is not, so its payload is read in bounded chunks and a
// header that promises more than the stream holds fails before the memory is reserved.
#include "tessera/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/io/byte_text.h"
#include "tessera/tensor/factory.h"

namespace tessera::data {

namespace {

// Builds the messages: every error names the file, and for gzip says whose offsets these are.
class Reporter {
 public:
  Reporter(const std::filesystem::path& file, bool gzip) : file_(file), gzip_(gzip) {}

  template <class... Parts>
  [[noreturn]] void fail(uint64_t offset, const Parts&... parts) const {
    throw DataError(detail::concat("IDX file '", file_.string(), "'",
                                   gzip_ ? " (gzip-compressed; offsets are in the decompressed stream)" : "",
                                   ": at ", gzip_ ? "decompressed " : "", "byte offset ", offset, ": ",
                                   parts...));
  }

 private:
  std::filesystem::path file_;
  bool gzip_;
};

// A stream of bytes with its current offset: a raw file or a decompressed gzip stream.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to `count` bytes; fewer only at the end of the stream. Throws on I/O errors.
  virtual size_t read(void* destination, size_t count) = 0;
  // Bytes left to read, where known without reading them (a raw file).
  virtual std::optional<uint64_t> remaining() const = 0;
  uint64_t offset() const { return offset_; }

 protected:
  uint64_t offset_ = 0;
};

class RawFileSource final : public ByteSource {
 public:
  RawFileSource(std::FILE* file, uint64_t size, const Reporter& reporter)
      : file_(file), size_(size), reporter_(reporter) {}
  ~RawFileSource() override { std::fclose(file_); }

  size_t read(void* destination, size_t count) override {
    size_t got = std::fread(destination, 1, count, file_);
    if (got < count && std::ferror(file_)) {
      reporter_.fail(offset_ + got, "read error: ", std::strerror(errno));
    }
    offset_ += got;
    return got;
  }
  std::optional<uint64_t> remaining() const override { return size_ > offset_ ? size_ - offset_ : 0; }

 private:
  std::FILE* file_;
  uint64_t size_;
  const Reporter& reporter_;
};

class GzipSource final : public ByteSource {
 public:
  GzipSource(gzFile file, const Reporter& reporter) : file_(file), reporter_(reporter) {
    gzbuffer(file_, 1 << 17);
  }
  ~GzipSource() override { gzclose(file_); }

  size_t read(void* destination, size_t count) override {
    auto* out = static_cast<uint8_t*>(destination);
    size_t total = 0;
    while (total < count) {
      // gzread takes an unsigned count and returns an int: stay well inside both.
      unsigned chunk = static_cast<unsigned>(std::min<size_t>(count - total, size_t{1} << 30));
      int got = gzread(file_, out + total, chunk);
      if (got < 0) fail_from_zlib(offset_ + total);
      total += static_cast<size_t>(got);
      if (static_cast<unsigned>(got) < chunk) {
        int code = Z_OK;
        gzerror(file_, &code);
        // zlib reports a compressed stream that stops early as Z_BUF_ERROR, not as an end.
        if (code != Z_OK && code != Z_STREAM_END) fail_from_zlib(offset_ + total);
        break;
      }
    }
    offset_ += total;
    return total;
  }
  std::optional<uint64_t> remaining() const override { return std::nullopt; }

 private:
  [[noreturn]] void fail_from_zlib(uint64_t offset) {
    int code = Z_OK;
    const char* message = gzerror(file_, &code);
    if (code == Z_BUF_ERROR) {
      reporter_.fail(offset, "the gzip stream is truncated: decompression stops here (zlib: ", message, ")");
    }
    reporter_.fail(offset, "the gzip stream is corrupt (zlib: ", message, ")");
  }

  gzFile file_;
  const Reporter& reporter_;
};

bool starts_with_gzip_magic(const std::filesystem::path& file) {
  std::FILE* handle = std::fopen(file.c_str(), "rb");
  if (handle == nullptr) return false;  // opening it again below reports the error
  std::array<uint8_t, 2> magic{};
  size_t got = std::fread(magic.data(), 1, magic.size(), handle);
  std::fclose(handle);
  return got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

std::unique_ptr<ByteSource> open_source(const std::filesystem::path& file, bool gzip, const Reporter& reporter) {
  auto fail_open = [&] {
    throw DataError(detail::concat("IDX file '", file.string(), "': cannot open it: ", std::strerror(errno)));
  };
  if (gzip) {
    gzFile handle = gzopen(file.c_str(), "rb");
    if (handle == nullptr) fail_open();
    return std::make_unique<GzipSource>(handle, reporter);
  }
  std::FILE* handle = std::fopen(file.c_str(), "rb");
  if (handle == nullptr) fail_open();
  if (std::fseek(handle, 0, SEEK_END) != 0) {
    std::fclose(handle);
    fail_open();
  }
  long size = std::ftell(handle);
  std::rewind(handle);
  if (size < 0) {
    std::fclose(handle);
    fail_open();
  }
  return std::make_unique<RawFileSource>(handle, static_cast<uint64_t>(size), reporter);
}

// Reads one header field of `count` bytes; a stream that ends inside it is an error at the end.
void read_field(ByteSource& source, uint8_t* destination, size_t count, const Reporter& reporter,
                const std::string& what) {
  uint64_t start = source.offset();
  size_t got = source.read(destination, count);
  if (got < count) {
    reporter.fail(start + got, "the file ends inside the header: expected ", what, " at bytes ", start, "..",
                  start + count - 1, ", found ", got, " of its ", count, " bytes");
  }
}

struct ElementType {
  DType stored;           // the dtype of the returned tensor
  size_t file_bytes = 0;  // bytes per element in the file
  const char* name = "";
};

std::optional<ElementType> element_type(uint8_t code) {
  switch (static_cast<IdxType>(code)) {
    case IdxType::u8: return ElementType{DType::u8, 1, "0x08 (uint8)"};
    case IdxType::i8: return ElementType{DType::i64, 1, "0x09 (int8)"};
    case IdxType::i16: return ElementType{DType::i64, 2, "0x0B (int16)"};
    case IdxType::i32: return ElementType{DType::i64, 4, "0x0C (int32)"};
    case IdxType::f32: return ElementType{DType::f32, 4, "0x0D (float32)"};
    case IdxType::f64: return ElementType{DType::f64, 8, "0x0E (float64)"};
  }
  return std::nullopt;
}

template <class Unsigned>
Unsigned load_big_endian(const uint8_t* bytes) {
  Unsigned value = 0;
  for (size_t i = 0; i < sizeof(Unsigned); ++i) value = static_cast<Unsigned>(value << 8 | bytes[i]);
  return value;
}

// Converts `count` big-endian file elements at `bytes` into the tensor's dtype at `out`.
void convert_elements(IdxType type, const uint8_t* bytes, int64_t count, void* out) {
  switch (type) {
    case IdxType::u8:
      if (count > 0) std::memcpy(out, bytes, static_cast<size_t>(count));
      return;
    case IdxType::i8:
      for (int64_t i = 0; i < count; ++i) static_cast<int64_t*>(out)[i] = static_cast<int8_t>(bytes[i]);
      return;
    case IdxType::i16:
      for (int64_t i = 0; i < count; ++i) {
        static_cast<int64_t*>(out)[i] = static_cast<int16_t>(load_big_endian<uint16_t>(bytes + 2 * i));
      }
      return;
    case IdxType::i32:
      for (int64_t i = 0; i < count; ++i) {
        static_cast<int64_t*>(out)[i] = static_cast<int32_t>(load_big_endian<uint32_t>(bytes + 4 * i));
      }
      return;
    case IdxType::f32:
      for (int64_t i = 0; i < count; ++i) {
        static_cast<float*>(out)[i] = std::bit_cast<float>(load_big_endian<uint32_t>(bytes + 4 * i));
      }
      return;
    case IdxType::f64:
      for (int64_t i = 0; i < count; ++i) {
        static_cast<double*>(out)[i] = std::bit_cast<double>(load_big_endian<uint64_t>(bytes + 8 * i));
      }
      return;
  }
}

// The whole payload, exactly `expected` bytes; reading in chunks keeps a lying header
// from reserving more memory than the stream really holds (about twice its size at most).
std::vector<uint8_t> read_payload(ByteSource& source, uint64_t expected, const Reporter& reporter,
                                  const std::string& promise) {
  const uint64_t start = source.offset();
  if (auto remaining = source.remaining()) {
    if (*remaining < expected) {
      reporter.fail(start + *remaining, "the file ends inside the data: ", promise, ", found ", *remaining);
    }
    if (*remaining > expected) {
      reporter.fail(start + expected, "expected the end of the file after the data (", promise, "), found ",
                    *remaining - expected, " more bytes");
    }
  }
  constexpr uint64_t kChunk = uint64_t{16} << 20;
  std::vector<uint8_t> payload;
  payload.reserve(static_cast<size_t>(std::min(expected, kChunk)));
  while (payload.size() < expected) {
    size_t want = static_cast<size_t>(std::min(expected - payload.size(), kChunk));
    size_t old_size = payload.size();
    payload.resize(old_size + want);
    size_t got = source.read(payload.data() + old_size, want);
    if (got < want) {
      reporter.fail(source.offset(), "the file ends inside the data: ", promise, ", found ", old_size + got);
    }
  }
  // Anything after the data means the header does not describe this file.
  uint64_t extra = 0;
  std::array<uint8_t, 1 << 14> scratch;
  while (size_t got = source.read(scratch.data(), scratch.size())) extra += got;
  if (extra > 0) {
    reporter.fail(start + expected, "expected the end of the file after the data (", promise, "), found ", extra,
                  " more bytes");
  }
  return payload;
}

}  // namespace

Tensor read_idx(const std::filesystem::path& file) {
  std::error_code error;
  if (std::filesystem::is_directory(file, error)) {
    throw DataError(detail::concat("IDX file '", file.string(), "': is a directory, expected a file"));
  }
  const bool gzip = starts_with_gzip_magic(file);
  const Reporter reporter(file, gzip);
  std::unique_ptr<ByteSource> source = open_source(file, gzip, reporter);

  std::array<uint8_t, 2> zeros{};
  read_field(*source, zeros.data(), 2, reporter, "the two zero bytes that open an IDX file");
  if (zeros[0] != 0 || zeros[1] != 0) {
    reporter.fail(zeros[0] != 0 ? 0 : 1, "expected the two zero bytes that open an IDX file, found ",
                  io::byte_text(zeros[0]), " ", io::byte_text(zeros[1]), " (not an IDX file)");
  }
  uint8_t type_code = 0;
  read_field(*source, &type_code, 1, reporter, "the type code");
  std::optional<ElementType> element = element_type(type_code);
  if (!element) {
    reporter.fail(2, "expected a type code (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, "
                     "0x0E float64), found ", io::byte_text(type_code));
  }
  uint8_t ndim = 0;
  read_field(*source, &ndim, 1, reporter, "the number of dimensions");
  if (ndim < 1 || ndim > kMaxIdxDims) {
    reporter.fail(3, "expected the number of dimensions, 1 to ", kMaxIdxDims, ", found ", int{ndim});
  }

  Shape shape;
  uint64_t numel = 1;
  // Shapes are int64 and the payload is indexed with size_t: keep the count inside both. The
  // product of the non-zero sizes must fit too, even when a zero size makes the count 0,
  // because strides multiply them ([0, 2^30, 2^30, 2^30] would overflow a stride).
  uint64_t nonzero_product = 1;
  for (int d = 0; d < ndim; ++d) {
    std::array<uint8_t, 4> bytes{};
    const uint64_t field_offset = source->offset();
    read_field(*source, bytes.data(), 4, reporter, detail::concat("the big-endian u32 size of dimension ", d));
    const uint32_t size = load_big_endian<uint32_t>(bytes.data());
    shape.push_back(size);
    if (size != 0 && (__builtin_mul_overflow(nonzero_product, uint64_t{size}, &nonzero_product) ||
                      nonzero_product > static_cast<uint64_t>(INT64_MAX))) {
      reporter.fail(field_offset, "the sizes so far, ", shape_str(shape), ", have more elements than fit in 63 bits");
    }
    numel *= size;  // 0 or nonzero_product: cannot overflow
  }
  uint64_t payload_bytes = 0;
  if (__builtin_mul_overflow(numel, uint64_t{element->file_bytes}, &payload_bytes) ||
      payload_bytes > static_cast<uint64_t>(INT64_MAX) || payload_bytes > SIZE_MAX) {
    reporter.fail(source->offset(), "shape ", shape_str(shape), " of ", element->name,
                  " elements is more bytes than fit in 63 bits");
  }
  const std::string promise =
      detail::concat("the header (type ", element->name, ", shape ", shape_str(shape), ") promises ", payload_bytes,
                     " data bytes at offsets [", source->offset(), ", ",
                     source->offset() + payload_bytes, ")");

  std::vector<uint8_t> payload = read_payload(*source, payload_bytes, reporter, promise);
  Tensor result = empty(shape, {.dtype = element->stored});
  convert_elements(static_cast<IdxType>(type_code), payload.data(), static_cast<int64_t>(numel),
                   numel > 0 ? result.data_ptr() : nullptr);
  return result;
}

}  // namespace tessera::data
