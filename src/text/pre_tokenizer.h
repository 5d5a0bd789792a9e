// GPT-2's pre-tokenizer: the regular expression that cuts text into pieces (words with
// their leading space, runs of digits, of punctuation, of whitespace) before byte-pair
// merges run inside each piece. It is GPT-2's pattern, run by PCRE2 (JIT-compiled) with
// Unicode properties:
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// with \s written as \p{White_Space} (and \S as \P{White_Space}): that is what \s means in
// Python's `regex` module, which GPT-2's own encoder.py used, and in tiktoken and Hugging
// Face's tokenizers; PCRE2's \s would also take U+180E. The letters and digits are those
// of the Unicode version PCRE2 was built with (Debian 12's 10.42: Unicode 15.0).
//
// Bytes that are not UTF-8 cannot match the pattern: the text is cut at each maximal
// subpart of an ill-formed sequence (see utf8.h), which becomes a piece of its own, and the
// well-formed stretches between them are split as if each were a whole text. The pieces
// always concatenate to the input, byte for byte.
//
//   ts::text::PreTokenizer split;
//   split.pieces("Hello world's  end\n");   // "Hello", " world", "'s", " ", " end", "\n"
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::text {

// The pattern as PCRE2 runs it (the comment above gives it in GPT-2's spelling).
extern const char* const kGpt2SplitPattern;

class PreTokenizer {
 public:
  // Compiles the pattern. NotCompiledError when Tessera was built without PCRE2.
  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Calls `on_piece` with each piece of `text`, in order. Thread-safe: one PreTokenizer can
  // split texts on several threads at once.
  void split(std::string_view text, const std::function<void(std::string_view piece)>& on_piece) const;
  // The pieces as strings.
  std::vector<std::string> pieces(std::string_view text) const;

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;
};

}  // namespace tessera::text
