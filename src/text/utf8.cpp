// UTF-8 decoding by the table of well-formed byte sequences (Unicode 15, table 3-7): the
// second byte's range depends on the first (E0 A0..BF, ED 80..9F, F0 90..BF, F4 80..8F),
// which rules out overlong forms, surrogates and code points above U+10FFFF. A sequence
// that breaks off is one maximal subpart: the bytes up to (not including) the first one
// that cannot continue it.
#include "tessera/text/utf8.h"

#include <cstdint>

namespace tessera::text {

namespace {

// The allowed range of the byte after `lead`, and the sequence length; length 0: `lead`
// cannot start a sequence (80..BF, C0, C1, F5..FF).
struct LeadByte {
  int length = 0;
  uint8_t second_low = 0x80, second_high = 0xBF;
};

LeadByte lead_byte(uint8_t lead) {
  if (lead < 0x80) return {1};
  if (lead >= 0xC2 && lead <= 0xDF) return {2};
  if (lead == 0xE0) return {3, 0xA0, 0xBF};
  if (lead == 0xED) return {3, 0x80, 0x9F};
  if (lead >= 0xE1 && lead <= 0xEF) return {3};
  if (lead == 0xF0) return {4, 0x90, 0xBF};
  if (lead >= 0xF1 && lead <= 0xF3) return {4};
  if (lead == 0xF4) return {4, 0x80, 0x8F};
  return {0};
}

}  // namespace

Utf8Char decode_utf8(std::string_view bytes) {
  const auto* b = reinterpret_cast<const uint8_t*>(bytes.data());
  const LeadByte lead = lead_byte(b[0]);
  if (lead.length == 1) return {b[0], 1, true};
  if (lead.length == 0) return {kReplacementCharacter, 1, false};
  char32_t code_point = b[0] & (0x7F >> lead.length);
  for (int i = 1; i < lead.length; ++i) {
    const uint8_t low = i == 1 ? lead.second_low : 0x80, high = i == 1 ? lead.second_high : 0xBF;
    if (static_cast<size_t>(i) >= bytes.size() || b[i] < low || b[i] > high) {
      return {kReplacementCharacter, static_cast<size_t>(i), false};
    }
    code_point = code_point << 6 | (b[i] & 0x3F);
  }
  return {code_point, static_cast<size_t>(lead.length), true};
}

size_t valid_utf8_prefix(std::string_view bytes) {
  size_t offset = 0;
  while (offset < bytes.size()) {
    // ASCII runs are most text: skip them a byte at a time without the table.
    if (static_cast<uint8_t>(bytes[offset]) < 0x80) {
      ++offset;
      continue;
    }
    const Utf8Char c = decode_utf8(bytes.substr(offset));
    if (!c.valid) break;
    offset += c.length;
  }
  return offset;
}

std::string replace_invalid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t offset = 0;
  while (offset < bytes.size()) {
    const size_t valid = valid_utf8_prefix(bytes.substr(offset));
    out.append(bytes.substr(offset, valid));
    offset += valid;
    if (offset == bytes.size()) break;
    offset += decode_utf8(bytes.substr(offset)).length;
    append_utf8(out, kReplacementCharacter);
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | c >> 6);
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | c >> 12);
    out += static_cast<char>(0x80 | (c >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | c >> 18);
    out += static_cast<char>(0x80 | (c >> 12 & 0x3F));
    out += static_cast<char>(0x80 | (c >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

}  // namespace tessera::text
