// IDX reader. The header is read field by field so that a file cut short names the field
// it ends in; the payload length the header promises is computed with overflow checks and
// must equal what follows exactly. A raw file's length is known before anything is
// allocated. A gzip stream's is not, so its payload is decompressed chunk by chunk straight
// into the result: its pages are committed only as data arrives, so a header that promises
// more than the stream holds costs no more memory than the stream really holds, and the
// file is held once (never a byte buffer and a tensor side by side).
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

std::string hex_byte(uint8_t byte) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02X", byte);
  return text;
}

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

// "the header (type 0x08 (uint8), shape [2, 3]) promises 6 data bytes at offsets [16, 22)"
std::string promise_of(const IdxHeader& header) {
  return detail::concat("the header (type ", element_type(static_cast<uint8_t>(header.type))->name, ", shape ",
                        shape_str(header.shape), ") promises ", header.payload_bytes, " data bytes at offsets [",
                        header.data_offset, ", ", header.data_offset + header.payload_bytes, ")");
}

// Deflate expands a byte into at most 1032 (a 258-byte match per 2 bits, RFC 1951).
constexpr uint64_t kMaxDeflateRatio = 1032;

// The header's promise against the file, before anything is read or allocated: a raw
// file's length exactly; a gzip file's at most what its compressed size can hold.
void check_length(const std::filesystem::path& file, const ByteSource& source, const IdxHeader& header,
                  const Reporter& reporter) {
  std::optional<uint64_t> remaining = source.remaining();
  if (!remaining) {
    std::error_code error;
    const uint64_t compressed = std::filesystem::file_size(file, error);
    if (!error && header.payload_bytes / kMaxDeflateRatio > compressed) {
      reporter.fail(header.data_offset, promise_of(header), ", more than a gzip file of ", compressed,
                    " bytes can hold (deflate expands at most ", kMaxDeflateRatio,
                    " times): the header is corrupt or the data cut short");
    }
    return;  // the exact length is checked while reading
  }
  if (*remaining < header.payload_bytes) {
    reporter.fail(header.data_offset + *remaining, "the file ends inside the data: ", promise_of(header), ", found ",
                  *remaining);
  }
  if (*remaining > header.payload_bytes) {
    reporter.fail(header.data_offset + header.payload_bytes, "expected the end of the file after the data (",
                  promise_of(header), "), found ", *remaining - header.payload_bytes, " more bytes");
  }
}

// Reads the payload the header promises straight into `out` (converted to the tensor's
// dtype chunk by chunk), then checks that nothing follows it.
void read_payload_into(ByteSource& source, const IdxHeader& header, const Reporter& reporter, void* out) {
  const uint64_t start = source.offset();
  const std::string promise = promise_of(header);
  const size_t file_bytes = element_type(static_cast<uint8_t>(header.type))->file_bytes;
  const size_t out_bytes = element_size(element_type(static_cast<uint8_t>(header.type))->stored);
  constexpr uint64_t kChunk = uint64_t{16} << 20;  // a multiple of every element size
  std::vector<uint8_t> chunk(static_cast<size_t>(std::min(header.payload_bytes, kChunk)));
  for (uint64_t done = 0; done < header.payload_bytes;) {
    const size_t want = static_cast<size_t>(std::min(header.payload_bytes - done, kChunk));
    const size_t got = source.read(chunk.data(), want);
    if (got < want) {
      reporter.fail(source.offset(), "the file ends inside the data: ", promise, ", found ", done + got);
    }
    const uint64_t first = done / file_bytes;
    convert_elements(header.type, chunk.data(), static_cast<int64_t>(want / file_bytes),
                     static_cast<uint8_t*>(out) + first * out_bytes);
    done += want;
  }
  // Anything after the data means the header does not describe this file.
  uint64_t extra = 0;
  std::array<uint8_t, 1 << 14> scratch;
  while (size_t got = source.read(scratch.data(), scratch.size())) extra += got;
  if (extra > 0) {
    reporter.fail(start + header.payload_bytes, "expected the end of the file after the data (", promise, "), found ",
                  extra, " more bytes");
  }
}

// The header's fields, checked; the source is left at the first data byte.
IdxHeader parse_header(ByteSource& source, const Reporter& reporter, bool gzip) {
  std::array<uint8_t, 2> zeros{};
  read_field(source, zeros.data(), 2, reporter, "the two zero bytes that open an IDX file");
  if (zeros[0] != 0 || zeros[1] != 0) {
    reporter.fail(zeros[0] != 0 ? 0 : 1, "expected the two zero bytes that open an IDX file, found ",
                  hex_byte(zeros[0]), " ", hex_byte(zeros[1]), " (not an IDX file)");
  }
  uint8_t type_code = 0;
  read_field(source, &type_code, 1, reporter, "the type code");
  std::optional<ElementType> element = element_type(type_code);
  if (!element) {
    reporter.fail(2, "expected a type code (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, "
                     "0x0E float64), found ", hex_byte(type_code));
  }
  uint8_t ndim = 0;
  read_field(source, &ndim, 1, reporter, "the number of dimensions");
  if (ndim < 1 || ndim > kMaxIdxDims) {
    reporter.fail(3, "expected the number of dimensions, 1 to ", kMaxIdxDims, ", found ", int{ndim});
  }

  IdxHeader header{.type = static_cast<IdxType>(type_code), .shape = {}, .data_offset = 0, .payload_bytes = 0,
                   .gzip = gzip};
  uint64_t numel = 1;
  // Shapes are int64 and the payload is indexed with size_t: keep the count inside both. The
  // product of the non-zero sizes must fit too, even when a zero size makes the count 0,
  // because strides multiply them ([0, 2^30, 2^30, 2^30] would overflow a stride).
  uint64_t nonzero_product = 1;
  for (int d = 0; d < ndim; ++d) {
    std::array<uint8_t, 4> bytes{};
    const uint64_t field_offset = source.offset();
    read_field(source, bytes.data(), 4, reporter, detail::concat("the big-endian u32 size of dimension ", d));
    const uint32_t size = load_big_endian<uint32_t>(bytes.data());
    header.shape.push_back(size);
    if (size != 0 && (__builtin_mul_overflow(nonzero_product, uint64_t{size}, &nonzero_product) ||
                      nonzero_product > static_cast<uint64_t>(INT64_MAX))) {
      reporter.fail(field_offset, "the sizes so far, ", shape_str(header.shape), ", have more elements than fit in 63 bits");
    }
    numel *= size;  // 0 or nonzero_product: cannot overflow
  }
  // The tensor's bytes too (int8 becomes int64): they must fit where the tensor is allocated.
  uint64_t tensor_bytes = 0;
  if (__builtin_mul_overflow(numel, uint64_t{element->file_bytes}, &header.payload_bytes) ||
      __builtin_mul_overflow(numel, uint64_t{element_size(element->stored)}, &tensor_bytes) ||
      tensor_bytes > static_cast<uint64_t>(INT64_MAX) || tensor_bytes > SIZE_MAX) {
    reporter.fail(source.offset(), "shape ", shape_str(header.shape), " of ", element->name,
                  " elements is more bytes than fit in 63 bits");
  }
  header.data_offset = source.offset();
  return header;
}

// Only a regular file is opened: opening a FIFO would wait for a writer forever.
void check_regular_file(const std::filesystem::path& file) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(file, error);
  if (!error && status.type() != std::filesystem::file_type::regular) {
    const char* what = status.type() == std::filesystem::file_type::directory ? "a directory"
                       : status.type() == std::filesystem::file_type::fifo    ? "a FIFO (named pipe)"
                                                                              : "not a regular file";
    throw DataError(detail::concat("IDX file '", file.string(), "': it is ", what, ", expected a file"));
  }
}

}  // namespace

const char* idx_type_name(IdxType type) {
  std::optional<ElementType> element = element_type(static_cast<uint8_t>(type));
  return element ? element->name : "an unknown type";
}

IdxHeader read_idx_header(const std::filesystem::path& file) {
  check_regular_file(file);
  const bool gzip = starts_with_gzip_magic(file);
  const Reporter reporter(file, gzip);  // outlives the source, which reports through it
  std::unique_ptr<ByteSource> source = open_source(file, gzip, reporter);
  IdxHeader header = parse_header(*source, reporter, gzip);
  check_length(file, *source, header, reporter);
  return header;
}

Tensor read_idx(const std::filesystem::path& file) {
  check_regular_file(file);
  const bool gzip = starts_with_gzip_magic(file);
  const Reporter reporter(file, gzip);  // outlives the source, which reports through it
  std::unique_ptr<ByteSource> source = open_source(file, gzip, reporter);
  const IdxHeader header = parse_header(*source, reporter, gzip);
  check_length(file, *source, header, reporter);
  // A gzip stream that holds less than promised fails part-way; until then only the pages
  // written have been committed, so the memory used is what the stream really held.
  Tensor result = empty(header.shape, {.dtype = element_type(static_cast<uint8_t>(header.type))->stored});
  read_payload_into(*source, header, reporter, result.numel() > 0 ? result.data_ptr() : nullptr);
  return result;
}

}  // namespace tessera::data
