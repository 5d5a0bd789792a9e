// How a format error names one byte of a file: "0x1F" (the IDX reader's header bytes, the
// GPT-2 tokenizer's byte spellings). Internal to the library: not installed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace tessera::io {

inline std::string byte_text(uint8_t byte) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02X", byte);
  return text;
}

}  // namespace tessera::io
