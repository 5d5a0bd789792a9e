// Loading checks the vocabulary as far as encoding relies on it: ids number the tokens
// 0..N-1 once each, every token is spelled in the byte-to-unicode map, all 256 single
// bytes are tokens, and each merge rule joins two tokens into a third. Encoding can then
// never meet a byte or a pair it has no answer for.
#include "tessera/text/gpt2_tokenizer.h"

#include <array>
#include <cstdio>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "tessera/io/byte_text.h"
#include "tessera/io/errors.h"
#include "tessera/io/json.h"
#include "tessera/io/posix_file.h"
#include "tessera/tensor/error.h"
#include "tessera/text/byte_level.h"
#include "tessera/text/byte_pair_merges.h"
#include "tessera/text/pre_tokenizer.h"
#include "tessera/text/utf8.h"

namespace tessera::text {

namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};

// Tokens of pieces already merged. Pieces are words, numbers, runs of spaces: text repeats
// them endlessly, so most lookups hit. Sharded by hash, each shard with its own lock, so
// threads encoding different files rarely wait on each other; a full shard starts over.
class PieceCache {
 public:
  static constexpr size_t kLongestPiece = 64;  // longer pieces rarely repeat: not kept

  bool append_cached(std::string_view piece, std::vector<int64_t>& out) const {
    Shard& shard = shard_of(piece);
    std::lock_guard lock(shard.mutex);
    auto found = shard.tokens.find(piece);
    if (found == shard.tokens.end()) return false;
    out.insert(out.end(), found->second.begin(), found->second.end());
    return true;
  }

  void insert(std::string_view piece, const std::vector<int32_t>& tokens) const {
    if (piece.size() > kLongestPiece) return;
    Shard& shard = shard_of(piece);
    std::lock_guard lock(shard.mutex);
    if (shard.tokens.size() >= kShardCapacity) shard.tokens.clear();
    shard.tokens.emplace(piece, tokens);
  }

 private:
  static constexpr size_t kShards = 64, kShardCapacity = 8192;
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> tokens;
  };
  Shard& shard_of(std::string_view piece) const { return shards_[StringHash{}(piece) >> 58]; }
  mutable std::array<Shard, kShards> shards_;
};

// GPT-2's encoder.json is 1,042,301 bytes and vocab.bpe 456,318: files 8 times larger are
// refused unread (a wrong or hostile file), and encoder.json's JSON values may take at most
// io::json::kFileMemoryPerByte times its size.
constexpr uint64_t kMaxVocabularyFileBytes = uint64_t{8} << 20;

std::string read_tokenizer_file(const std::filesystem::path& file) {
  try {
    return io::read_regular_file(file.string(), kMaxVocabularyFileBytes, "a GPT-2 tokenizer file");
  } catch (const io::FormatError&) {
    throw;
  } catch (const io::IOError& error) {
    throw io::IOError(
        detail::concat("GPT-2 tokenizer: ", error.what(), " (scripts/get-gpt2-tokenizer fetches the files)"));
  }
}

std::string code_point_name(char32_t c) {
  char text[16];
  std::snprintf(text, sizeof text, "U+%04X", static_cast<unsigned>(c));
  return text;
}

// A token as the files spell it (each character one byte) -> its bytes; nullopt and the
// offending character when a character stands for no byte.
struct Spelling {
  std::string bytes;
  char32_t bad_character = 0;
  bool ok = true;
};

Spelling unspell(std::string_view spelled) {
  Spelling result;
  while (!spelled.empty()) {
    const Utf8Char c = decode_utf8(spelled);
    const std::optional<uint8_t> byte = c.valid ? unicode_to_byte(c.code_point) : std::nullopt;
    if (!byte) return {"", c.code_point, false};
    result.bytes += static_cast<char>(*byte);
    spelled.remove_prefix(c.length);
  }
  return result;
}

}  // namespace

struct GPT2Tokenizer::Vocabulary {
  std::vector<std::string> token_bytes;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_of_bytes;
  std::array<int32_t, 256> byte_tokens{};
  BytePairMerges merges;
  int32_t eot = 0;
  std::string encoder_source;  // for vocab.bpe's errors about the tokens it must make
  PreTokenizer pre_tokenizer;
  PieceCache cache;

  void read_encoder_json(std::string_view text, const std::string& source);
  void read_vocab_bpe(std::string_view text, const std::string& source);
  void encode_piece(std::string_view piece, std::vector<int32_t>& scratch, std::vector<int64_t>& out) const;
};

void GPT2Tokenizer::Vocabulary::read_encoder_json(std::string_view text, const std::string& source) {
  auto fail = [&](size_t offset, const auto&... parts) {
    throw io::FormatError(detail::concat("GPT-2 vocabulary '", source, "': at byte offset ", offset, ": ", parts...));
  };
  encoder_source = source;
  io::json::Value root;
  try {
    root = io::json::parse(text, io::json::file_limits(text.size()));
  } catch (const io::json::ParseError& error) {
    fail(error.offset(), "cannot parse it as JSON: ", error.reason());
  }
  if (!root.is_object()) fail(0, "expected an object of token -> id, found ", io::json::kind_name(root.kind()));
  const io::json::Object& members = root.as_object();
  if (members.size() > static_cast<size_t>(INT32_MAX)) fail(0, "more tokens than int32 ids can number");
  const auto count = static_cast<int64_t>(members.size());
  token_bytes.assign(members.size(), std::string());
  std::vector<const std::string*> spelling_of(members.size(), nullptr);
  token_of_bytes.reserve(members.size());
  for (const auto& [spelled, value] : members) {
    const size_t offset = value.source_offset();
    if (!value.is_int()) {
      fail(offset, "the id of token \"", spelled, "\" must be an integer, found ", io::json::kind_name(value.kind()));
    }
    const int64_t id = value.as_int();
    if (id < 0 || id >= count) {
      fail(offset, "token \"", spelled, "\" has id ", id, ", outside [0, ", count, "): the ids must number the ", count,
           " tokens from 0");
    }
    if (spelling_of[id] != nullptr)
      fail(offset, "id ", id, " is given to both \"", *spelling_of[id], "\" and \"", spelled, "\"");
    Spelling unspelled = unspell(spelled);
    if (!unspelled.ok) {
      fail(offset, "token \"", spelled, "\" has the character ", code_point_name(unspelled.bad_character),
           ", which stands for no byte in GPT-2's byte-to-unicode map");
    }
    if (unspelled.bytes.empty()) fail(offset, "the empty string is not a token");
    spelling_of[id] = &spelled;
    token_of_bytes.emplace(unspelled.bytes, static_cast<int32_t>(id));
    token_bytes[id] = std::move(unspelled.bytes);
  }
  for (int byte = 0; byte < 256; ++byte) {
    auto found = token_of_bytes.find(std::string(1, static_cast<char>(byte)));
    if (found == token_of_bytes.end()) {
      std::string spelled;
      append_utf8(spelled, byte_to_unicode(static_cast<uint8_t>(byte)));
      throw io::FormatError(detail::concat("GPT-2 vocabulary '", source, "': no token for the byte ",
                                           io::byte_text(static_cast<uint8_t>(byte)), " (\"", spelled,
                                           "\"): byte-level BPE needs all 256 bytes as tokens"));
    }
    byte_tokens[byte] = found->second;
  }
  auto end_of_text = token_of_bytes.find(kEndOfText);
  if (end_of_text == token_of_bytes.end()) {
    throw io::FormatError(detail::concat("GPT-2 vocabulary '", source, "': has no \"", kEndOfText, "\" token"));
  }
  eot = end_of_text->second;
}

// GPT-2's vocabulary is 256 byte tokens, one token made by each merge rule, and
// <|endoftext|>: 50,257 tokens, 50,000 rules. A rule making a token another rule made, or
// fewer rules than that (a truncated or empty vocab.bpe, which would still load and
// tokenize differently), is an error.
void GPT2Tokenizer::Vocabulary::read_vocab_bpe(std::string_view text, const std::string& source) {
  const auto expected_merges = static_cast<int64_t>(token_bytes.size()) - 257;
  std::vector<int64_t> made_at_line(token_bytes.size(), 0);  // the rule that makes each token
  size_t offset = 0;
  int64_t line_number = 0;
  while (offset < text.size()) {
    const size_t end = std::min(text.find('\n', offset), text.size());
    std::string_view line = text.substr(offset, end - offset);
    const size_t line_offset = offset;
    ++line_number;
    offset = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    auto fail = [&](const auto&... parts) {
      throw io::FormatError(detail::concat("GPT-2 merges '", source, "': line ", line_number, " (byte offset ",
                                           line_offset, "): ", parts...));
    };
    if (line_number == 1 && line.starts_with("#version")) continue;
    if (line.empty()) {
      if (offset >= text.size()) break;  // the final newline
      fail("an empty line; expected a merge rule \"LEFT RIGHT\"");
    }
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      fail("expected a merge rule: two tokens separated by one space, found \"", line, "\"");
    }
    const std::string_view left = line.substr(0, space), right = line.substr(space + 1);
    int32_t ids[2];
    std::string joined;
    for (int side = 0; side < 2; ++side) {
      const std::string_view part = side == 0 ? left : right;
      const Spelling unspelled = unspell(part);
      if (!unspelled.ok) {
        fail("\"", part, "\" has the character ", code_point_name(unspelled.bad_character),
             ", which stands for no byte in GPT-2's byte-to-unicode map");
      }
      auto found = token_of_bytes.find(unspelled.bytes);
      if (found == token_of_bytes.end()) fail("\"", part, "\" is not a token of the vocabulary");
      ids[side] = found->second;
      joined += unspelled.bytes;
    }
    auto merged = token_of_bytes.find(joined);
    if (merged == token_of_bytes.end()) {
      fail("\"", left, "\" + \"", right, "\" makes \"", left, right, "\", which is not a token of the vocabulary");
    }
    if (auto earlier = merges.find(ids[0], ids[1])) {
      fail("the rule \"", left, " ", right, "\" was already given, at rank ", earlier->rank);
    }
    if (merged->second == eot) {
      fail("\"", left, "\" + \"", right, "\" makes ", kEndOfText, ", which no merge rule may make");
    }
    if (int64_t& made = made_at_line[merged->second]; made != 0) {
      fail("\"", left, "\" + \"", right, "\" makes \"", left, right, "\", which the rule on line ", made,
           " already makes: each rule makes a token of its own");
    } else {
      made = line_number;
    }
    merges.add(ids[0], ids[1], merged->second);
  }
  if (merges.size() != expected_merges) {
    const std::string need = detail::concat(encoder_source, " has ", token_bytes.size(), " tokens, which need ",
                                            expected_merges, " (256 bytes, one token per rule, ", kEndOfText, ")");
    if (text.empty()) {
      throw io::FormatError(detail::concat("GPT-2 merges '", source, "': byte offset 0: the file is empty; ", need));
    }
    throw io::FormatError(detail::concat("GPT-2 merges '", source, "': at byte offset ", text.size(),
                                         " (the end of the file, after line ", line_number, "): ", merges.size(),
                                         " merge rules, but ", need, ": is the file truncated?"));
  }
}

void GPT2Tokenizer::Vocabulary::encode_piece(std::string_view piece, std::vector<int32_t>& scratch,
                                             std::vector<int64_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_tokens[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (cache.append_cached(piece, out)) return;
  scratch.clear();
  for (char byte : piece) scratch.push_back(byte_tokens[static_cast<uint8_t>(byte)]);
  merges.merge(scratch);
  out.insert(out.end(), scratch.begin(), scratch.end());
  cache.insert(piece, scratch);
}

GPT2Tokenizer::GPT2Tokenizer(std::shared_ptr<const Vocabulary> vocabulary) : vocabulary_(std::move(vocabulary)) {}

GPT2Tokenizer::GPT2Tokenizer(const std::filesystem::path& directory)
    : GPT2Tokenizer(directory / "encoder.json", directory / "vocab.bpe") {}

GPT2Tokenizer::GPT2Tokenizer(const std::filesystem::path& encoder_json, const std::filesystem::path& vocab_bpe) {
  auto vocabulary = std::make_shared<Vocabulary>();
  vocabulary->read_encoder_json(read_tokenizer_file(encoder_json), encoder_json.string());
  vocabulary->read_vocab_bpe(read_tokenizer_file(vocab_bpe), vocab_bpe.string());
  vocabulary_ = std::move(vocabulary);
}

GPT2Tokenizer GPT2Tokenizer::from_strings(std::string_view encoder_json, std::string_view vocab_bpe,
                                          const std::string& source) {
  auto vocabulary = std::make_shared<Vocabulary>();
  vocabulary->read_encoder_json(encoder_json, source + " (encoder.json)");
  vocabulary->read_vocab_bpe(vocab_bpe, source + " (vocab.bpe)");
  return GPT2Tokenizer(std::move(vocabulary));
}

std::vector<int64_t> GPT2Tokenizer::encode(std::string_view text) const {
  std::vector<int64_t> tokens;
  encode(text, tokens);
  return tokens;
}

void GPT2Tokenizer::encode(std::string_view text, std::vector<int64_t>& tokens) const {
  // About one token per 4 bytes of English.
  tokens.reserve(tokens.size() + text.size() / 4 + 1);
  std::vector<int32_t> scratch;
  vocabulary_->pre_tokenizer.split(text,
                                   [&](std::string_view piece) { vocabulary_->encode_piece(piece, scratch, tokens); });
}

std::string GPT2Tokenizer::decode_bytes(std::span<const int64_t> tokens) const {
  std::string bytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size()) {
      throw IndexError(detail::concat("GPT2Tokenizer::decode: token ", tokens[i], " at position ", i,
                                      " is outside the vocabulary [0, ", vocab_size(), ")"));
    }
    bytes += vocabulary_->token_bytes[static_cast<size_t>(tokens[i])];
  }
  return bytes;
}

std::string GPT2Tokenizer::decode(std::span<const int64_t> tokens) const {
  return replace_invalid_utf8(decode_bytes(tokens));
}

int64_t GPT2Tokenizer::vocab_size() const { return static_cast<int64_t>(vocabulary_->token_bytes.size()); }

int64_t GPT2Tokenizer::eot_token() const { return vocabulary_->eot; }

int64_t GPT2Tokenizer::merge_count() const { return vocabulary_->merges.size(); }

const std::string& GPT2Tokenizer::token_bytes(int64_t token) const {
  TS_CHECK(token >= 0 && token < vocab_size(), IndexError, "GPT2Tokenizer::token_bytes: token ", token,
           " is outside the vocabulary [0, ", vocab_size(), ")");
  return vocabulary_->token_bytes[static_cast<size_t>(token)];
}

std::optional<int64_t> GPT2Tokenizer::token_of_bytes(std::string_view bytes) const {
  auto found = vocabulary_->token_of_bytes.find(bytes);
  if (found == vocabulary_->token_of_bytes.end()) return std::nullopt;
  return found->second;
}

}  // namespace tessera::text
