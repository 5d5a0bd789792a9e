// The IDX format of the MNIST files: two zero bytes, a type code, the number of
// dimensions, one big-endian u32 size per dimension, then the elements, big-endian,
// row-major. read_idx accepts a raw file or a gzip-compressed one (recognised by its
// magic bytes 1f 8b, whatever its name) and checks every header field against the length
// of what follows, so a truncated, overlong or foreign file is a DataError naming the
// file, the byte offset and what was expected there, never a crash or a silent misread.
//
//   ts::Tensor images = ts::data::read_idx("data/mnist/train-images-idx3-ubyte");
//   // uint8 [60000, 28, 28]
#pragma once

#include <cstdint>
#include <filesystem>

#include "tessera/data/error.h"
#include "tessera/tensor/shape.h"
#include "tessera/tensor/tensor.h"

namespace tessera::data {

// The element type codes of IDX files.
enum class IdxType : uint8_t { u8 = 0x08, i8 = 0x09, i16 = 0x0B, i32 = 0x0C, f32 = 0x0D, f64 = 0x0E };

// At most this many dimensions are accepted; real IDX files have 1 to 4.
inline constexpr int kMaxIdxDims = 8;

// "0x08 (uint8)", as messages name the element types.
const char* idx_type_name(IdxType type);

// What an IDX file's header says, checked against the file: read first, it lets a caller
// refuse a file of the wrong type or shape before its data is read or any memory reserved.
struct IdxHeader {
  IdxType type = IdxType::u8;
  Shape shape{};
  uint64_t data_offset = 0;    // where the data begins (in the decompressed stream for gzip)
  uint64_t payload_bytes = 0;  // what the header promises
  bool gzip = false;
};

// Reads and checks the header; for a raw file also that exactly `payload_bytes` follow (a
// gzip stream's length is checked when it is read). DataError as read_idx.
IdxHeader read_idx_header(const std::filesystem::path& file);

// Reads an IDX file whole. The tensor has the header's shape and dtype uint8 for 0x08,
// int64 for the signed integer codes 0x09/0x0B/0x0C (Tessera has no narrower integers),
// float32 for 0x0D and float64 for 0x0E. Offsets in errors about a gzip file are offsets
// in its decompressed stream, and the message says so. Memory: the tensor, plus 16 MiB.
// A FIFO, a directory or another non-regular file is refused before it is opened.
Tensor read_idx(const std::filesystem::path& file);

}  // namespace tessera::data
