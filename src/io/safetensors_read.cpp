// safetensors reading. The constructor reads and validates the whole header before any
// tensor data is touched: the header length against the file size and a limit, the JSON,
// and for every entry its dtype, shape, offsets, byte count and overlap with the others.
// All arithmetic on sizes from the file is checked for overflow, because the file may be
// hostile. Every complaint is a FormatError "<file>: byte <offset>: tensor '<name>': ...".
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <numeric>
#include <sys/stat.h>
#include <unistd.h>

#include "tessera/io/json.h"
#include "tessera/io/posix_file.h"
#include "tessera/io/safetensors.h"
#include "tessera/tensor/native.h"

namespace tessera::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; Tessera reads it into host memory as is");

namespace {

constexpr uint64_t length_field_bytes = 8;

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr DTypeName supported_dtypes[] = {
    {DType::f32, "F32"}, {DType::f64, "F64"}, {DType::i64, "I64"},
    {DType::u8, "U8"},   {DType::bf16, "BF16"}, {DType::boolean, "BOOL"}};
// Names the format defines that Tessera has no dtype for: these get a clearer message
// than a name that is not a safetensors dtype at all.
constexpr std::string_view other_format_dtypes[] = {"I8",  "I16",     "U16",     "F16", "I32", "U32",
                                                    "U64", "F8_E4M3", "F8_E5M2", "C64", "F4"};

std::string quoted_tensor(const std::string& tensor) {
  return tensor.empty() ? std::string() : detail::concat("tensor '", tensor, "': ");
}

[[noreturn]] void format_error(const std::string& path, uint64_t offset, const std::string& tensor,
                               const std::string& message) {
  throw FormatError(detail::concat(path, ": byte ", offset, ": ", quoted_tensor(tensor), message));
}

// Validates one header entry; `at(v)` maps a JSON value to its byte offset in the file.
class EntryParser {
 public:
  EntryParser(const std::string& path, uint64_t header_offset, uint64_t data_size)
      : path_(path), header_offset_(header_offset), data_size_(data_size) {}

  TensorEntry parse(const std::string& name, const json::Value& value) const {
    name_ = name;
    if (!value.is_object()) fail(value, "expected an object, found ", json::kind_name(value.kind()));
    for (const auto& [key, member] : value.as_object()) {
      if (key != "dtype" && key != "shape" && key != "data_offsets") {
        fail(member, "unexpected member \"", key, "\" (an entry has dtype, shape and data_offsets)");
      }
    }
    TensorEntry entry;
    entry.name = name;
    entry.dtype = parse_dtype(required(value, "dtype"));
    uint64_t numel = parse_shape(required(value, "shape"), entry.shape);
    const json::Value& offsets = required(value, "data_offsets");
    parse_offsets(offsets, entry);
    uint64_t needed = 0;
    if (__builtin_mul_overflow(numel, element_size(entry.dtype), &needed)) {
      fail(offsets, "shape ", shape_str(entry.shape), " is too large to address");
    }
    if (entry.nbytes() != needed) {
      fail(offsets, "data_offsets [", entry.data_begin, ", ", entry.data_end, "] hold ", entry.nbytes(),
           " bytes, but ", safetensors_dtype_name(entry.dtype), " shape ", shape_str(entry.shape), " needs ", needed);
    }
    return entry;
  }

 private:
  template <class... Parts>
  [[noreturn]] void fail(const json::Value& where, const Parts&... parts) const {
    format_error(path_, header_offset_ + where.source_offset(), name_, detail::concat(parts...));
  }

  const json::Value& required(const json::Value& entry, std::string_view key) const {
    const json::Value* member = entry.find(key);
    if (member == nullptr) fail(entry, "missing \"", key, "\"");
    return *member;
  }

  DType parse_dtype(const json::Value& value) const {
    if (!value.is_string()) fail(value, "dtype: expected a string, found ", json::kind_name(value.kind()));
    const std::string& name = value.as_string();
    if (auto dtype = dtype_from_safetensors(name)) return *dtype;
    bool in_format = std::find(std::begin(other_format_dtypes), std::end(other_format_dtypes), name) !=
                     std::end(other_format_dtypes);
    fail(value, in_format ? "dtype " : "unknown dtype ", "\"", name, "\"",
         in_format ? " is not supported by Tessera" : "", " (Tessera reads F32, F64, I64, U8, BF16 and BOOL)");
  }

  // Fills `shape`; returns the element count. The product of the non-zero sizes must fit
  // int64 even when a zero makes the count 0, so that no later shape arithmetic overflows.
  uint64_t parse_shape(const json::Value& value, Shape& shape) const {
    if (!value.is_array()) fail(value, "shape: expected an array, found ", json::kind_name(value.kind()));
    uint64_t product = 1;
    bool overflow = false;
    bool has_zero = false;
    for (const json::Value& size : value.as_array()) {
      if (!size.is_int() || size.as_int() < 0) fail(size, "shape: expected non-negative integers");
      auto extent = static_cast<uint64_t>(size.as_int());
      if (extent == 0) has_zero = true;
      else overflow = overflow || __builtin_mul_overflow(product, extent, &product);
      shape.push_back(size.as_int());
    }
    if (overflow || product > static_cast<uint64_t>(INT64_MAX)) {
      fail(value, "shape ", shape_str(shape), " has more elements than int64 can count");
    }
    return has_zero ? 0 : product;
  }

  void parse_offsets(const json::Value& value, TensorEntry& entry) const {
    if (!value.is_array() || value.as_array().size() != 2) fail(value, "data_offsets: expected [begin, end]");
    const json::Value& begin = value.as_array()[0];
    const json::Value& end = value.as_array()[1];
    for (const json::Value* offset : {&begin, &end}) {
      if (!offset->is_int() || offset->as_int() < 0) fail(*offset, "data_offsets: expected non-negative integers");
    }
    entry.data_begin = static_cast<uint64_t>(begin.as_int());
    entry.data_end = static_cast<uint64_t>(end.as_int());
    if (entry.data_begin > entry.data_end) {
      fail(value, "data_offsets [", entry.data_begin, ", ", entry.data_end, "]: begin is after end");
    }
    if (entry.data_end > data_size_) {
      fail(value, "data_offsets [", entry.data_begin, ", ", entry.data_end, "] end past the data section, which holds ",
           data_size_, " bytes (is the file truncated?)");
    }
  }

  const std::string& path_;
  uint64_t header_offset_;
  uint64_t data_size_;
  mutable std::string name_;
};

// The JSON header of the open file `fd` (file_size bytes), checked against the file's size and
// the header limit; header_bytes is set to its length.
json::Value read_header(int fd, const std::string& path, uint64_t file_size, uint64_t& header_bytes) {
  auto read_exactly = [&](void* out, uint64_t count, uint64_t offset, const char* what) {
    int64_t got = pread_full(fd, out, count, offset);
    if (got < 0) throw IOError(detail::concat("cannot read '", path, "': ", os_error(static_cast<int>(-got))));
    if (static_cast<uint64_t>(got) != count) {
      format_error(path, offset + static_cast<uint64_t>(got), "", detail::concat("the file ends inside ", what));
    }
  };

  if (file_size < length_field_bytes) {
    format_error(path, 0, "", detail::concat("the file is ", file_size, " bytes, too short for the ",
                                             length_field_bytes, "-byte header length"));
  }
  uint64_t header_length = 0;
  read_exactly(&header_length, length_field_bytes, 0, "the header length");
  if (header_length > max_header_bytes) {
    format_error(path, 0, "", detail::concat("header length ", header_length, " exceeds the limit of ",
                                             max_header_bytes, " bytes (a corrupt length?)"));
  }
  if (header_length > file_size - length_field_bytes) {
    format_error(path, 0, "", detail::concat("header length ", header_length, " runs past the end of the file (",
                                             file_size, " bytes; is it truncated?)"));
  }
  std::string text(header_length, '\0');
  read_exactly(text.data(), header_length, length_field_bytes, "the header");
  header_bytes = header_length;

  json::Value header;
  try {
    header = json::parse(text, json::file_limits(text.size()));
  } catch (const json::ParseError& e) {
    format_error(path, length_field_bytes + e.offset(), "", "invalid JSON header: " + e.reason());
  }
  if (!header.is_object()) {
    format_error(path, length_field_bytes, "", detail::concat("the header must be a JSON object, found ",
                                                              json::kind_name(header.kind())));
  }
  return header;
}

// "__metadata__": an object of strings.
void read_metadata(const json::Value& value, const std::string& path, Metadata& metadata) {
  if (!value.is_object()) {
    format_error(path, length_field_bytes + value.source_offset(), "", "__metadata__: expected an object of strings");
  }
  for (const auto& [key, text_value] : value.as_object()) {
    if (!text_value.is_string()) {
      format_error(path, length_field_bytes + text_value.source_offset(), "",
                   detail::concat("__metadata__ \"", key, "\": expected a string, found ",
                                  json::kind_name(text_value.kind())));
    }
    metadata.emplace(key, text_value.as_string());
  }
}

// No two tensors may share bytes (empty ones share nothing).
void check_no_overlap(const std::vector<TensorEntry>& entries, const std::string& path, uint64_t data_offset) {
  std::vector<size_t> order(entries.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair(entries[a].data_begin, entries[a].data_end) < std::pair(entries[b].data_begin, entries[b].data_end);
  });
  const TensorEntry* previous = nullptr;
  for (size_t i : order) {
    const TensorEntry& entry = entries[i];
    if (entry.nbytes() == 0) continue;
    if (previous != nullptr && entry.data_begin < previous->data_end) {
      format_error(path, data_offset + entry.data_begin, entry.name,
                   detail::concat("data_offsets [", entry.data_begin, ", ", entry.data_end, "] overlap tensor '",
                                  previous->name, "' at [", previous->data_begin, ", ", previous->data_end, "]"));
    }
    previous = &entry;
  }
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  for (const auto& [candidate, name] : supported_dtypes) {
    if (candidate == dtype) return name;
  }
  throw DTypeError(detail::concat("safetensors has no name for dtype ", dtype_name(dtype)));
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& [dtype, candidate] : supported_dtypes) {
    if (candidate == name) return dtype;
  }
  return std::nullopt;
}

int64_t TensorEntry::numel() const { return shape_numel(shape); }

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  FileDescriptor fd = open_regular_file(path, &file_size_);
  uint64_t header_length = 0;
  const json::Value header = read_header(fd.get(), path, file_size_, header_length);
  data_offset_ = length_field_bytes + header_length;

  EntryParser parser(path, length_field_bytes, file_size_ - data_offset_);
  for (const auto& [name, value] : header.as_object()) {
    if (name == "__metadata__") {
      read_metadata(value, path, metadata_);
      continue;
    }
    // The JSON parser already refuses repeated keys, so names are unique here.
    index_.emplace(name, entries_.size());
    entries_.push_back(parser.parse(name, value));
  }
  check_no_overlap(entries_, path, data_offset_);
  fd_ = fd.release();
}

SafetensorsFile::~SafetensorsFile() { FileDescriptor(fd_).reset(); }

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      file_size_(other.file_size_),
      data_offset_(other.data_offset_),
      entries_(std::move(other.entries_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    FileDescriptor(fd_).reset();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    file_size_ = other.file_size_;
    data_offset_ = other.data_offset_;
    entries_ = std::move(other.entries_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

std::vector<std::string> SafetensorsFile::keys() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const TensorEntry& entry : entries_) names.push_back(entry.name);
  return names;
}

const TensorEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = index_.find(name);
  TS_CHECK(it != index_.end(), ValueError, "'", path_, "' has no tensor '", name, "'");
  return entries_[it->second];
}

void SafetensorsFile::read_bytes(const TensorEntry& entry, uint64_t first_byte, uint64_t count, void* out) const {
  TS_CHECK(fd_ >= 0, ValueError, "reading '", path_, "': the file object was moved from");
  uint64_t offset = data_offset_ + entry.data_begin + first_byte;
  int64_t got = pread_full(fd_, out, count, offset);
  if (got < 0) {
    throw IOError(detail::concat("cannot read tensor '", entry.name, "' from '", path_,
                                 "': ", os_error(static_cast<int>(-got))));
  }
  if (static_cast<uint64_t>(got) != count) {
    format_error(path_, offset + static_cast<uint64_t>(got), entry.name,
                 "the file ends inside the tensor's data (was it truncated after it was opened?)");
  }
  if (entry.dtype == DType::boolean) {
    // Any other byte would be undefined behaviour once read as a C++ bool; the destination
    // is cleared before the error, so no such byte is left in it either.
    auto* bytes = static_cast<unsigned char*>(out);
    for (uint64_t i = 0; i < count; ++i) {
      if (bytes[i] > 1) {
        const int value = bytes[i];
        std::memset(out, 0, count);
        format_error(path_, offset + i, entry.name,
                     detail::concat("BOOL element ", first_byte + i, " holds the byte ", value,
                                    "; a bool must be 0 or 1"));
      }
    }
  }
}

Tensor SafetensorsFile::read(const std::string& name) const {
  const TensorEntry& found = entry(name);
  Tensor out = native::empty(found.shape, found.dtype, Device::cpu());
  if (found.nbytes() > 0) read_bytes(found, 0, found.nbytes(), out.data_ptr());
  return out;
}

Tensor SafetensorsFile::read_slice(const std::string& name, int64_t first_element, int64_t count) const {
  const TensorEntry& found = entry(name);
  TS_CHECK(count >= 0, IndexError, "read_slice('", name, "') from '", path_, "': negative count ", count);
  Tensor out = native::empty({count}, found.dtype, Device::cpu());
  read_into(name, first_element, out);
  return out;
}

void SafetensorsFile::read_into(const std::string& name, int64_t first_element, Tensor& destination) const {
  const TensorEntry& found = entry(name);
  TS_CHECK(destination.defined(), ValueError, "read_into('", name, "') from '", path_, "': undefined destination");
  TS_CHECK(destination.dtype() == found.dtype, DTypeError, "read_into('", name, "') from '", path_,
           "': the tensor is ", dtype_name(found.dtype), " but the destination is ", dtype_name(destination.dtype()));
  TS_CHECK(destination.is_contiguous(), ValueError, "read_into('", name, "') from '", path_,
           "': the destination ", destination.str(), " is not contiguous");
  int64_t count = destination.numel();
  int64_t numel = found.numel();
  TS_CHECK(first_element >= 0 && first_element <= numel && count <= numel - first_element, IndexError,
           "read_into('", name, "') from '", path_, "': ", count, " elements from element ", first_element,
           " leave the tensor's ", numel, " elements");
  if (count == 0) return;
  uint64_t size = element_size(found.dtype);
  uint64_t first_byte = static_cast<uint64_t>(first_element) * size;
  uint64_t bytes = static_cast<uint64_t>(count) * size;
  if (destination.device().is_cpu()) {
    read_bytes(found, first_byte, bytes, destination.data_ptr());
    return;
  }
  std::vector<unsigned char> host(bytes);
  read_bytes(found, first_byte, bytes, host.data());
  copy_bytes(destination.data_ptr(), destination.device(), host.data(), Device::cpu(), bytes);
}

StateDict SafetensorsFile::read_all() const {
  StateDict tensors;
  for (const TensorEntry& entry : entries_) tensors.insert(entry.name, read(entry.name));
  return tensors;
}

StateDict load(const std::string& path) { return SafetensorsFile(path).read_all(); }

Metadata load_metadata(const std::string& path) { return SafetensorsFile(path).metadata(); }

}  // namespace tessera::io
