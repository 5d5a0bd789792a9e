// CRC32C (Castagnoli, polynomial 0x1EDC6F41 reflected as 0x82F63B78): the checksum that
// checkpoints record per tensor chunk. It detects every burst error of up to 32 bits and
// all odd numbers of bit flips, and x86-64 computes it in hardware (SSE4.2's crc32
// instruction, used when the build targets a CPU that has it; a table otherwise).
//
//   uint32_t crc = ts::io::crc32c(bytes.data(), bytes.size());
//   crc = ts::io::crc32c(more.data(), more.size(), crc);      // continues the same stream
//   // crc32c("123456789", 9) == 0xE3069283 (RFC 3720's check value)
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::io {

// The CRC32C of `count` bytes, continuing from `previous` (the CRC of the bytes before
// them; 0 to start a stream).
uint32_t crc32c(const void* data, size_t count, uint32_t previous = 0);

// The table-driven computation alone, whatever the CPU: what the tests compare the
// hardware path against.
uint32_t crc32c_portable(const void* data, size_t count, uint32_t previous = 0);

}  // namespace tessera::io
