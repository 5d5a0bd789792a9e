// UTF-8 as the tokenizer reads and writes it. decode_utf8 reads one character and, where the
// bytes are not UTF-8, says how many of them form one "maximal subpart" of an ill-formed
// sequence (Unicode's recommended practice, chapter 3, "U+FFFD Substitution of Maximal
// Subparts"; the WHATWG decoder of browsers and Node, and Python's errors="replace", both
// follow it). Well-formed means the shortest form, no surrogates (U+D800..U+DFFF) and
// nothing above U+10FFFF: exactly what PCRE2 accepts as UTF-8.
//
//   ts::text::Utf8Char c = ts::text::decode_utf8("\xE2\x82\xAC!");   // {.code_point = 0x20AC, .length = 3}
//   ts::text::replace_invalid_utf8("a\xFF" "b");                      // "a\uFFFD" "b"
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tessera::text {

inline constexpr char32_t kReplacementCharacter = 0xFFFD;

struct Utf8Char {
  char32_t code_point = 0;  // the character, or kReplacementCharacter where !valid
  size_t length = 0;        // bytes read: the character's, or the maximal subpart's (>= 1)
  bool valid = false;
};

// The character at the start of `bytes` (which must not be empty).
Utf8Char decode_utf8(std::string_view bytes);

// Bytes of the longest well-formed UTF-8 prefix of `bytes`.
size_t valid_utf8_prefix(std::string_view bytes);

// `bytes` with each maximal subpart of an ill-formed sequence replaced by U+FFFD (EF BF BD),
// as Python's bytes.decode("utf-8", errors="replace") and Node's TextDecoder do.
std::string replace_invalid_utf8(std::string_view bytes);

// Appends the UTF-8 form of `code_point` (which must be a Unicode scalar value).
void append_utf8(std::string& out, char32_t code_point);

}  // namespace tessera::text
