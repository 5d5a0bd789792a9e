// The map is built once from its definition (printable Latin-1 kept, the rest shifted up to
// U+0100 in byte order), as OpenAI's encoder.py builds it.
#include "tessera/text/byte_level.h"

#include <array>

namespace tessera::text {

namespace {

constexpr bool stands_for_itself(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
}

constexpr std::array<char32_t, 256> make_byte_to_unicode() {
  std::array<char32_t, 256> table{};
  char32_t next_moved = 0x100;
  for (int byte = 0; byte < 256; ++byte) table[byte] = stands_for_itself(byte) ? char32_t(byte) : next_moved++;
  return table;
}

constexpr std::array<char32_t, 256> kByteToUnicode = make_byte_to_unicode();
// Every character of the map is below U+0144 (0x100 + 68).
constexpr char32_t kMapEnd = 0x144;

constexpr std::array<int16_t, kMapEnd> make_unicode_to_byte() {
  std::array<int16_t, kMapEnd> table{};
  for (auto& entry : table) entry = -1;
  for (int byte = 0; byte < 256; ++byte) table[kByteToUnicode[byte]] = static_cast<int16_t>(byte);
  return table;
}

constexpr std::array<int16_t, kMapEnd> kUnicodeToByte = make_unicode_to_byte();

}  // namespace

char32_t byte_to_unicode(uint8_t byte) { return kByteToUnicode[byte]; }

std::optional<uint8_t> unicode_to_byte(char32_t c) {
  if (c >= kMapEnd || kUnicodeToByte[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(kUnicodeToByte[c]);
}

}  // namespace tessera::text
