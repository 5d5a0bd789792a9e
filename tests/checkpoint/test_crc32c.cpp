// CRC32C against RFC 3720's test vectors (B.4) and the usual check value, the hardware
// path against the table path for every length and alignment, and continuation.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <tessera/tessera.h>

namespace io = tessera::io;

TEST_CASE("CRC32C matches RFC 3720's vectors and the check value") {
  std::vector<uint8_t> zeros(32, 0x00), ones(32, 0xFF), ascending(32), descending(32);
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<uint8_t>(i);
    descending[i] = static_cast<uint8_t>(31 - i);
  }
  for (auto crc : {io::crc32c, io::crc32c_portable}) {
    CHECK(crc(zeros.data(), zeros.size(), 0) == 0x8A9136AAu);
    CHECK(crc(ones.data(), ones.size(), 0) == 0x62A8AB43u);
    CHECK(crc(ascending.data(), ascending.size(), 0) == 0x46DD794Eu);
    CHECK(crc(descending.data(), descending.size(), 0) == 0x113FDB5Cu);
    CHECK(crc("123456789", 9, 0) == 0xE3069283u);
    CHECK(crc(nullptr, 0, 0) == 0u);
  }
}

TEST_CASE("CRC32C: hardware and table paths agree at every length and alignment; streams continue") {
  std::vector<uint8_t> bytes(300);
  uint32_t state = 12345;
  for (auto& b : bytes) {
    state = state * 1103515245u + 12345u;
    b = static_cast<uint8_t>(state >> 16);
  }
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t length = 0; length + offset <= 200; ++length) {
      CHECK(io::crc32c(bytes.data() + offset, length) == io::crc32c_portable(bytes.data() + offset, length));
    }
  }
  uint32_t whole = io::crc32c(bytes.data(), bytes.size());
  for (size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{150}, size_t{300}}) {
    uint32_t first = io::crc32c(bytes.data(), split);
    CHECK(io::crc32c(bytes.data() + split, bytes.size() - split, first) == whole);
    CHECK(io::crc32c_portable(bytes.data() + split, bytes.size() - split, first) == whole);
  }
}
