// Chunked CRC32C of tensor data: a checkpoint records one CRC32C per `chunk_bytes` bytes
// of every tensor slice it stores (the last chunk may be shorter), so that a reader that
// needs only part of a slice (a rank loading at another world size) verifies what it reads
// without reading the whole slice: at most one partial chunk more at each end.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/io/safetensors.h"
#include "tessera/tensor/tensor.h"

namespace tessera::checkpoint {

// The chunk size written by this version: 1 MiB (a multiple of every element size).
inline constexpr uint64_t kDefaultChunkBytes = uint64_t{1} << 20;

// Chunks of `bytes` bytes: ceil(bytes / chunk_bytes).
uint64_t chunk_count(uint64_t bytes, uint64_t chunk_bytes);

// The CRC32C of each chunk of `bytes` bytes at `data`.
std::vector<uint32_t> chunk_crcs(const void* data, uint64_t bytes, uint64_t chunk_bytes);
// The same for a tensor's contiguous host data.
std::vector<uint32_t> chunk_crcs(const Tensor& tensor, uint64_t chunk_bytes);

// Reads elements [first, first + destination.numel()) of `tensor` in `file` into
// `destination` (contiguous, the tensor's dtype, CPU), checking the CRC32C of every chunk
// the range touches against `crcs` (the tensor's chunk CRCs, as recorded). A mismatch is an
// io::FormatError naming the file, the tensor, the chunk and its byte range in the file.
void read_verified(const io::SafetensorsFile& file, const std::string& tensor, const std::vector<uint32_t>& crcs,
                   uint64_t chunk_bytes, int64_t first, const Tensor& destination);

// Checks that `file`'s entry `tensor` exists with `dtype` and `shape` and that `crcs` has
// one CRC per chunk of it; FormatError naming `recorded_in` (the metadata) otherwise.
void check_entry(const io::SafetensorsFile& file, const std::string& tensor, DType dtype, const Shape& shape,
                 const std::vector<uint32_t>& crcs, uint64_t chunk_bytes, const std::string& recorded_in);

}  // namespace tessera::checkpoint
