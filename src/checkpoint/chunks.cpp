#include "tessera/checkpoint/chunks.h"

#include <cstring>
#include <sstream>

#include "tessera/io/crc32c.h"
#include "tessera/tensor/native.h"

namespace tessera::checkpoint {

namespace {

std::string hex32(uint32_t value) {
  std::ostringstream out;
  out << "0x" << std::hex;
  out.width(8);
  out.fill('0');
  out << value;
  return out.str();
}

}  // namespace

uint64_t chunk_count(uint64_t bytes, uint64_t chunk_bytes) { return bytes / chunk_bytes + (bytes % chunk_bytes != 0); }

std::vector<uint32_t> chunk_crcs(const void* data, uint64_t bytes, uint64_t chunk_bytes) {
  std::vector<uint32_t> crcs;
  crcs.reserve(chunk_count(bytes, chunk_bytes));
  const auto* at = static_cast<const unsigned char*>(data);
  for (uint64_t begin = 0; begin < bytes; begin += chunk_bytes) {
    crcs.push_back(io::crc32c(at + begin, std::min(chunk_bytes, bytes - begin)));
  }
  return crcs;
}

std::vector<uint32_t> chunk_crcs(const Tensor& tensor, uint64_t chunk_bytes) {
  Tensor host = tensor.detach();
  if (host.is_cuda()) host = native::to_device(host, Device::cpu());
  host = native::contiguous(host);
  return chunk_crcs(host.numel() > 0 ? host.data_ptr() : nullptr, host.nbytes(), chunk_bytes);
}

void check_entry(const io::SafetensorsFile& file, const std::string& tensor, DType dtype, const Shape& shape,
                 const std::vector<uint32_t>& crcs, uint64_t chunk_bytes, const std::string& recorded_in) {
  if (!file.contains(tensor)) {
    throw io::FormatError(tessera::detail::concat(file.path(), ": byte 8: the header has no tensor '", tensor,
                                                  "', which ", recorded_in, " records in it"));
  }
  const io::TensorEntry& entry = file.entry(tensor);
  if (entry.dtype != dtype || entry.shape != shape) {
    throw io::FormatError(tessera::detail::concat(file.path(), ": byte ", file.data_offset() + entry.data_begin, ": tensor '",
                                         tensor, "' is ",
                                         io::safetensors_dtype_name(entry.dtype), " ", shape_str(entry.shape), " but ",
                                         recorded_in, " records ", io::safetensors_dtype_name(dtype), " ",
                                         shape_str(shape)));
  }
  if (crcs.size() != chunk_count(entry.nbytes(), chunk_bytes)) {
    throw io::FormatError(tessera::detail::concat(recorded_in, ": tensor '", tensor, "' of ", file.path(), " has ",
                                         entry.nbytes(), " bytes, so ", chunk_count(entry.nbytes(), chunk_bytes),
                                         " chunk CRCs, but ", crcs.size(), " are recorded"));
  }
}

void read_verified(const io::SafetensorsFile& file, const std::string& tensor, const std::vector<uint32_t>& crcs,
                   uint64_t chunk_bytes, int64_t first, const Tensor& destination) {
  const io::TensorEntry& entry = file.entry(tensor);
  const uint64_t element = element_size(entry.dtype);
  const int64_t count = destination.numel();
  TS_CHECK(first >= 0 && count <= entry.numel() - first, IndexError, "read_verified('", tensor, "') from '",
           file.path(), "': elements [", first, ", ", first + count, ") leave its ", entry.numel());
  TS_CHECK(destination.dtype() == entry.dtype && destination.is_contiguous() && !destination.is_cuda(), ValueError,
           "read_verified('", tensor, "'): the destination ", destination.str(), " must be contiguous CPU ",
           dtype_name(entry.dtype));
  TS_CHECK(chunk_bytes % element == 0, ValueError, "read_verified: chunk size ", chunk_bytes,
           " is not a multiple of the element size ", element);
  TS_CHECK(crcs.size() == chunk_count(entry.nbytes(), chunk_bytes), ValueError, "read_verified('", tensor,
           "'): ", crcs.size(), " CRCs for ", entry.nbytes(), " bytes");
  if (count == 0) return;

  // The chunks the range touches, read whole so that each can be checked.
  const uint64_t begin_byte = static_cast<uint64_t>(first) * element;
  const uint64_t end_byte = begin_byte + static_cast<uint64_t>(count) * element;
  const uint64_t first_chunk = begin_byte / chunk_bytes;
  const uint64_t chunks_begin = first_chunk * chunk_bytes;
  const uint64_t chunks_end = std::min(chunk_count(end_byte, chunk_bytes) * chunk_bytes, entry.nbytes());
  const bool direct = chunks_begin == begin_byte && chunks_end == end_byte;
  Tensor buffer = direct ? destination
                         : native::empty({static_cast<int64_t>((chunks_end - chunks_begin) / element)}, entry.dtype,
                                         Device::cpu());
  file.read_into(tensor, static_cast<int64_t>(chunks_begin / element), buffer);

  const auto* bytes = static_cast<const unsigned char*>(buffer.data_ptr());
  for (uint64_t at = chunks_begin; at < chunks_end; at += chunk_bytes) {
    const uint64_t size = std::min(chunk_bytes, chunks_end - at);
    const uint64_t chunk = at / chunk_bytes;
    const uint32_t computed = io::crc32c(bytes + (at - chunks_begin), size);
    if (computed != crcs[chunk]) {
      const uint64_t file_begin = file.data_offset() + entry.data_begin + at;
      throw io::FormatError(tessera::detail::concat(file.path(), ": byte ", file_begin, ": tensor '", tensor, "' chunk ", chunk,
                                           " (bytes [", file_begin, ", ", file_begin + size,
                                           ")): CRC32C mismatch: computed ", hex32(computed), ", recorded ",
                                           hex32(crcs[chunk]), " (the data is corrupt)"));
    }
  }
  if (!direct) {
    std::memcpy(destination.data_ptr(), bytes + (begin_byte - chunks_begin), end_byte - begin_byte);
  }
}

}  // namespace tessera::checkpoint
