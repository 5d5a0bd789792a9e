// A small vocabulary in GPT-2's file formats, built here independently of the loader under
// test: the 256 byte tokens (ids 0..255 in byte order, spelled through the byte-to-unicode
// map as encoder.json spells them), then the tokens that the given merge rules make, then
// <|endoftext|>.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tessera/text/byte_level.h"
#include "tessera/text/utf8.h"

namespace text_test {

// The spelling of a byte string in the vocabulary files.
inline std::string spell(const std::string& bytes) {
  std::string spelled;
  for (unsigned char byte : bytes) tessera::text::append_utf8(spelled, tessera::text::byte_to_unicode(byte));
  return spelled;
}

// JSON string literal of `text` (which is valid UTF-8 here): quotes and backslashes escaped.
inline std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

struct TinyVocabulary {
  std::string encoder_json, vocab_bpe;
};

// Merge rules as pairs of byte strings, in rank order.
inline TinyVocabulary tiny_vocabulary(const std::vector<std::pair<std::string, std::string>>& merges) {
  std::vector<std::string> tokens;
  for (int byte = 0; byte < 256; ++byte) tokens.push_back(std::string(1, static_cast<char>(byte)));
  TinyVocabulary files{"{", "#version: 0.2\n"};
  for (const auto& [left, right] : merges) {
    tokens.push_back(left + right);
    files.vocab_bpe += spell(left) + " " + spell(right) + "\n";
  }
  for (size_t id = 0; id < tokens.size(); ++id)
    files.encoder_json += json_string(spell(tokens[id])) + ": " + std::to_string(id) + ", ";
  files.encoder_json += "\"<|endoftext|>\": " + std::to_string(tokens.size()) + "}";
  return files;
}

}  // namespace text_test
