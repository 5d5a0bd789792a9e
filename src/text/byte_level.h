// GPT-2's byte-to-unicode map: the vocabulary files spell every token as a string of
// printable characters, one per byte. The 188 bytes that are printable Latin-1 ('!'..'~',
// U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves; the other 68 (controls, space, DEL,
// NBSP, soft hyphen) are moved, in byte order, to U+0100, U+0101, ... So a space is 'Ġ'
// (U+0120) and a newline 'Ċ' (U+010A), which is why "Ġthe" in encoder.json is " the".
//
//   ts::text::byte_to_unicode(' ');           // U'\u0120'
//   ts::text::unicode_to_byte(U'\u0120');     // ' '
#pragma once

#include <cstdint>
#include <optional>

namespace tessera::text {

// The character that stands for `byte` in GPT-2's vocabulary files.
char32_t byte_to_unicode(uint8_t byte);

// The byte that `c` stands for; nullopt for a character outside the map's 256.
std::optional<uint8_t> unicode_to_byte(char32_t c);

}  // namespace tessera::text
