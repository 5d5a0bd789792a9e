// CRC32C: slicing-by-8 tables (eight bytes per step) for any CPU, and SSE4.2's crc32
// instruction when the compiler targets it (-march=native on a CPU that has it). Both
// compute the same reflected CRC with the conventional pre- and post-inversion, so a
// stream's CRC can be continued across calls.
#include "tessera/io/crc32c.h"

#include <array>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace tessera::io {

namespace {

constexpr uint32_t kReflectedPolynomial = 0x82F63B78u;

// tables[k][b]: the CRC of byte b followed by k zero bytes.
constexpr std::array<std::array<uint32_t, 256>, 8> make_tables() {
  std::array<std::array<uint32_t, 256>, 8> tables{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kReflectedPolynomial : 0u);
    tables[0][byte] = crc;
  }
  for (uint32_t byte = 0; byte < 256; ++byte) {
    for (size_t k = 1; k < 8; ++k) tables[k][byte] = (tables[k - 1][byte] >> 8) ^ tables[0][tables[k - 1][byte] & 0xFFu];
  }
  return tables;
}

constexpr auto kTables = make_tables();

// Raw (not inverted) CRC state over `count` bytes.
uint32_t update_portable(uint32_t crc, const unsigned char* bytes, size_t count) {
  while (count >= 8) {
    uint64_t word = 0;
    std::memcpy(&word, bytes, 8);  // little-endian host (asserted by the safetensors code)
    word ^= crc;
    crc = kTables[7][word & 0xFF] ^ kTables[6][(word >> 8) & 0xFF] ^ kTables[5][(word >> 16) & 0xFF] ^
          kTables[4][(word >> 24) & 0xFF] ^ kTables[3][(word >> 32) & 0xFF] ^ kTables[2][(word >> 40) & 0xFF] ^
          kTables[1][(word >> 48) & 0xFF] ^ kTables[0][word >> 56];
    bytes += 8;
    count -= 8;
  }
  while (count-- > 0) crc = (crc >> 8) ^ kTables[0][(crc ^ *bytes++) & 0xFFu];
  return crc;
}

#if defined(__SSE4_2__)
uint32_t update_hardware(uint32_t crc, const unsigned char* bytes, size_t count) {
  uint64_t state = crc;
  while (count >= 8) {
    uint64_t word = 0;
    std::memcpy(&word, bytes, 8);
    state = _mm_crc32_u64(state, word);
    bytes += 8;
    count -= 8;
  }
  auto narrow = static_cast<uint32_t>(state);
  while (count-- > 0) narrow = _mm_crc32_u8(narrow, *bytes++);
  return narrow;
}
#endif

}  // namespace

uint32_t crc32c_portable(const void* data, size_t count, uint32_t previous) {
  return ~update_portable(~previous, static_cast<const unsigned char*>(data), count);
}

uint32_t crc32c(const void* data, size_t count, uint32_t previous) {
#if defined(__SSE4_2__)
  return ~update_hardware(~previous, static_cast<const unsigned char*>(data), count);
#else
  return crc32c_portable(data, count, previous);
#endif
}

}  // namespace tessera::io
