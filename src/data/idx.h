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
#include "tessera/tensor/tensor.h"

namespace tessera::data {

// The element type codes of IDX files.
enum class IdxType : uint8_t { u8 = 0x08, i8 = 0x09, i16 = 0x0B, i32 = 0x0C, f32 = 0x0D, f64 = 0x0E };

// At most this many dimensions are accepted; real IDX files have 1 to 4.
inline constexpr int kMaxIdxDims = 8;

// Reads an IDX file whole. The tensor has the header's shape and dtype uint8 for 0x08,
// int64 for the signed integer codes 0x09/0x0B/0x0C (Tessera has no narrower integers),
// float32 for 0x0D and float64 for 0x0E. Offsets in errors about a gzip file are offsets
// in its decompressed stream, and the message says so.
Tensor read_idx(const std::filesystem::path& file);

}  // namespace tessera::data
