// The tokenizer's parts, without GPT-2's vocabulary: UTF-8 decoding and its replacement of
// ill-formed sequences (compared with what Python's errors="replace" and Node's TextDecoder
// give), the byte-to-unicode map, the pre-tokenizer's pieces, byte-pair merging by rank on
// a small vocabulary, and the loader's errors for malformed vocabulary files.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <random>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "tessera/config.h"
#include "tessera/io/errors.h"
#include "tessera/text/byte_level.h"
#include "tessera/text/byte_pair_merges.h"
#include "tessera/text/gpt2_tokenizer.h"
#include "tessera/text/pre_tokenizer.h"
#include "tessera/text/utf8.h"
#include "test_support.h"
#include "tiny_vocabulary.h"

namespace text = tessera::text;
using test_support::contains;
using test_support::error_of;
using Pieces = std::vector<std::string>;

constexpr bool kPcre2 = TESSERA_HAS_PCRE2;

TEST_CASE("decode_utf8 reads characters of 1 to 4 bytes and the maximal subparts of ill-formed ones") {
  CHECK(text::decode_utf8("A").code_point == U'A');
  const text::Utf8Char euro = text::decode_utf8("\xE2\x82\xAC");
  CHECK((euro.valid && euro.code_point == 0x20AC && euro.length == 3));
  const text::Utf8Char emoji = text::decode_utf8("\xF0\x9F\x91\x8D");
  CHECK((emoji.valid && emoji.code_point == 0x1F44D && emoji.length == 4));
  CHECK(text::decode_utf8("\xF4\x8F\xBF\xBF").code_point == 0x10FFFF);
  // Invalid: (bytes, length of the maximal subpart).
  const std::vector<std::pair<std::string, size_t>> invalid{{"\x80", 1},
                                                            {"\xC0\x80", 1},
                                                            {"\xC1\xBF", 1},
                                                            {"\xE0\x80\x80", 1},
                                                            {"\xED\xA0\x80", 1},
                                                            {"\xF4\x90\x80\x80", 1},
                                                            {"\xF5\x80", 1},
                                                            {"\xFF", 1},
                                                            {"\xE2\x82", 2},
                                                            {"\xE2\x82x", 2},
                                                            {"\xF0\x9F\x98", 3},
                                                            {"\xC3", 1},
                                                            {"\xF1\x80\x80\xE1", 3}};
  for (const auto& [bytes, length] : invalid) {
    const text::Utf8Char c = text::decode_utf8(bytes);
    CHECK_MESSAGE((!c.valid && c.code_point == text::kReplacementCharacter && c.length == length), bytes);
  }
}

TEST_CASE("replace_invalid_utf8 gives what Python's errors='replace' and Node's TextDecoder give") {
  // Unicode's own example (chapter 3, U+FFFD substitution); Python and Node agree on all of these.
  CHECK(text::replace_invalid_utf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64") ==
        "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd");
  CHECK(text::replace_invalid_utf8("\xC0\x80") == "\uFFFD\uFFFD");
  CHECK(text::replace_invalid_utf8("\xED\xA0\x80") == "\uFFFD\uFFFD\uFFFD");
  CHECK(text::replace_invalid_utf8("\xF4\x90\x80\x80") == "\uFFFD\uFFFD\uFFFD\uFFFD");
  CHECK(text::replace_invalid_utf8("\xE2\x82x") == "\uFFFDx");
  CHECK(text::replace_invalid_utf8("\xF0\x9F\x98") == "\uFFFD");
  CHECK(text::replace_invalid_utf8("caf\xC3\xA9 \xF0\x9F\x91\x8D") == "caf\xC3\xA9 \xF0\x9F\x91\x8D");
  CHECK(text::valid_utf8_prefix("ab\xC3\xA9\xFF"
                                "cd") == 4);
}

TEST_CASE("the byte-to-unicode map is GPT-2's: printable Latin-1 kept, the other 68 bytes from U+0100 on") {
  CHECK(text::byte_to_unicode('!') == U'!');
  CHECK(text::byte_to_unicode('~') == U'~');
  CHECK(text::byte_to_unicode(0xA1) == 0xA1);
  CHECK(text::byte_to_unicode(0) == 0x100);
  CHECK(text::byte_to_unicode(' ') == 0x120);   // the 'Ġ' of "Ġthe"
  CHECK(text::byte_to_unicode('\n') == 0x10A);  // 'Ċ'
  CHECK(text::byte_to_unicode(0x7F) == 0x121);
  CHECK(text::byte_to_unicode(0xAD) == 0x143);  // the last one moved
  std::vector<bool> seen(0x144, false);
  for (int byte = 0; byte < 256; ++byte) {
    const char32_t c = text::byte_to_unicode(static_cast<uint8_t>(byte));
    REQUIRE(c < 0x144);
    CHECK_FALSE(seen[c]);
    seen[c] = true;
    CHECK(text::unicode_to_byte(c) == byte);
  }
  CHECK_FALSE(text::unicode_to_byte(0x144).has_value());
  CHECK_FALSE(text::unicode_to_byte(0x7F).has_value());  // DEL is moved, so its own code point stands for nothing
  CHECK_FALSE(text::unicode_to_byte(U' ').has_value());
}

TEST_CASE("the pre-tokenizer cuts text where GPT-2's pattern does" * doctest::skip(!kPcre2)) {
  const text::PreTokenizer split;
  CHECK(split.pieces("Hello world's  end\n") == Pieces{"Hello", " world", "'s", " ", " end", "\n"});
  CHECK(split.pieces("I'm they've we'll you'd it's can't") ==
        Pieces{"I", "'m", " they", "'ve", " we", "'ll", " you", "'d", " it", "'s", " can", "'t"});
  // The contractions are lower case only, and a leading space does not join them.
  CHECK(split.pieces("IT'S 'S 's") == Pieces{"IT", "'", "S", " '", "S", " '", "s"});
  CHECK(split.pieces("abc123 456!? ...") == Pieces{"abc", "123", " 456", "!?", " ..."});
  // A run of spaces leaves its last space to the word after it.
  CHECK(split.pieces("a   b") == Pieces{"a", "  ", " b"});
  CHECK(split.pieces("a   ") == Pieces{"a", "   "});
  CHECK(split.pieces("\n\n x") == Pieces{"\n\n", " x"});
  CHECK(split.pieces("\t\tx") == Pieces{"\t", "\t", "x"});
  CHECK(split.pieces("日本語の テキスト") == Pieces{"日本語の", " テキスト"});
  CHECK(split.pieces("x\u3000y") == Pieces{"x", "\u3000", "y"});
  CHECK(split.pieces("").empty());
}

TEST_CASE("\\s is Unicode's White_Space, as in Python's regex (GPT-2's encoder.py)" * doctest::skip(!kPcre2)) {
  const text::PreTokenizer split;
  // U+0085 (NEXT LINE) is White_Space; JavaScript's \s leaves it out (Encoder.js: "x", " \u0085", "y").
  CHECK(split.pieces("x \u0085y") == Pieces{"x", " ", "\u0085", "y"});
  // U+FEFF (BOM) is not; JavaScript's \s takes it (Encoder.js: "x", " ", "\uFEFF", "y").
  CHECK(split.pieces("x \uFEFFy") == Pieces{"x", " \uFEFF", "y"});
  // U+180E (MONGOLIAN VOWEL SEPARATOR) is not; PCRE2's own \s would take it.
  CHECK(split.pieces("x \u180Ey") == Pieces{"x", " \u180E", "y"});
}

TEST_CASE("bytes that are not UTF-8 are pieces of their own, one per maximal subpart" * doctest::skip(!kPcre2)) {
  const text::PreTokenizer split;
  CHECK(split.pieces("ab\xFF"
                     "cd") == Pieces{"ab", "\xFF", "cd"});
  CHECK(split.pieces("a \xFF") == Pieces{"a", " ", "\xFF"});
  CHECK(split.pieces(" \xE2\x80 x") == Pieces{" ", "\xE2\x80", " x"});
  CHECK(split.pieces("\xC0\x80") == Pieces{"\xC0", "\x80"});
  // Whatever the bytes, the pieces put together are the text.
  std::mt19937 random(12);
  for (int trial = 0; trial < 300; ++trial) {
    std::string bytes(random() % 64, '\0');
    for (char& byte : bytes)
      byte = static_cast<char>(random() % 4 == 0 ? random() % 256 : " a'1\xC3\xA9\n"[random() % 8]);
    std::string joined;
    for (const std::string& piece : split.pieces(bytes)) {
      CHECK_FALSE(piece.empty());
      joined += piece;
    }
    CHECK(joined == bytes);
  }
}

TEST_CASE("merges go by rank, each rank joining all its pairs left to right before the next") {
  text::BytePairMerges merges;
  CHECK(merges.add('a', 'a', 256));
  CHECK(merges.add(256, 256, 257));
  CHECK_FALSE(merges.add('a', 'a', 300));  // a pair has one rule
  CHECK(merges.size() == 2);
  CHECK(merges.find('a', 'a')->rank == 0);
  CHECK(merges.find(256, 256)->merged == 257);
  CHECK_FALSE(merges.find('a', 'b').has_value());

  auto merged = [&](std::vector<int32_t> tokens) {
    merges.merge(tokens);
    return tokens;
  };
  CHECK(merged({'a', 'a', 'a'}) == std::vector<int32_t>{256, 'a'});  // "a a a" -> "aa a", not "a aa"
  CHECK(merged({'a', 'a', 'a', 'a'}) == std::vector<int32_t>{257});
  CHECK(merged({'a', 'a', 'a', 'a', 'a', 'b'}) == std::vector<int32_t>{257, 'a', 'b'});
  CHECK(merged({'b'}) == std::vector<int32_t>{'b'});
  // A piece of 10^5 letters merges in O(n log n): 25,000 tokens of "aaaa".
  std::vector<int32_t> long_run = merged(std::vector<int32_t>(100000, 'a'));
  CHECK(long_run == std::vector<int32_t>(25000, 257));

  // A rule of lower rank that a join makes waits until the rank being joined is done, as in
  // GPT-2's bpe(): "a b a b" with "ab a" (rank 0) and "a b" (rank 1) is "ab ab", not "aba b".
  text::BytePairMerges out_of_order;
  out_of_order.add(300, 'a', 301);  // "ab" + "a"
  out_of_order.add('a', 'b', 300);
  std::vector<int32_t> tokens{'a', 'b', 'a', 'b'};
  out_of_order.merge(tokens);
  CHECK(tokens == std::vector<int32_t>{300, 300});
}

TEST_CASE("a small vocabulary in GPT-2's files encodes and decodes" * doctest::skip(!kPcre2)) {
  const text_test::TinyVocabulary files =
      text_test::tiny_vocabulary({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {" w", "o"}});
  const auto tokenizer = text::GPT2Tokenizer::from_strings(files.encoder_json, files.vocab_bpe);
  CHECK(tokenizer.vocab_size() == 263);
  CHECK(tokenizer.eot_token() == 262);
  CHECK(tokenizer.merge_count() == 6);
  CHECK(tokenizer.encode("hello world") == std::vector<int64_t>{259, 261, 'r', 'l', 'd'});
  CHECK(tokenizer.encode("hello hello") == std::vector<int64_t>{259, ' ', 259});  // the second from the cache
  CHECK(tokenizer.decode(std::vector<int64_t>{259, 261}) == "hello wo");
  CHECK(tokenizer.token_bytes(261) == " wo");
  CHECK(tokenizer.token_of_bytes("hell") == 258);
  CHECK_FALSE(tokenizer.token_of_bytes("world").has_value());
  // <|endoftext|> in text is text; the token decodes to its name.
  CHECK(tokenizer.encode("<|endoftext|>").size() == 13);
  CHECK(tokenizer.decode(std::vector<int64_t>{262}) == "<|endoftext|>");
  // Tokens that make ill-formed UTF-8: decode replaces it, decode_bytes keeps it.
  CHECK(tokenizer.decode(std::vector<int64_t>{'a', 0xE2, 0x82}) == "a\uFFFD");
  CHECK(tokenizer.decode_bytes(std::vector<int64_t>{'a', 0xE2, 0x82}) == "a\xE2\x82");
  CHECK(contains(error_of<tessera::IndexError>([&] {
                   tokenizer.decode(std::vector<int64_t>{1, 263});
                 }),
                 "token 263 at position 1 is outside the vocabulary [0, 263)"));
  CHECK(contains(error_of<tessera::IndexError>([&] { tokenizer.token_bytes(-1); }), "token -1"));
}

TEST_CASE("a malformed encoder.json is an error naming the file, the byte offset and the fault" *
          doctest::skip(!kPcre2)) {
  const text_test::TinyVocabulary good = text_test::tiny_vocabulary({{"a", "b"}});
  auto error_for = [&](const std::string& encoder_json) {
    return error_of<tessera::io::FormatError>(
        [&] { text::GPT2Tokenizer::from_strings(encoder_json, good.vocab_bpe, "tiny"); });
  };
  CHECK(contains(error_for("{\"a\": 0,"), "GPT-2 vocabulary 'tiny (encoder.json)': at byte offset 8: cannot parse it as JSON"));
  CHECK(contains(error_for("[1, 2]"), "at byte offset 0: expected an object of token -> id, found an array"));
  CHECK(contains(error_for("{\"a\": \"0\"}"),
                 "at byte offset 6: the id of token \"a\" must be an integer, found a string"));
  CHECK(contains(error_for("{\"a\": 0, \"b\": 5}"), "token \"b\" has id 5, outside [0, 2)"));
  CHECK(contains(error_for("{\"a\": 0, \"b\": 0}"), "id 0 is given to both \"a\" and \"b\""));
  CHECK(contains(error_for("{\"a \": 0}"), "token \"a \" has the character U+0020, which stands for no byte"));
  CHECK(contains(error_for("{\"\": 0}"), "the empty string is not a token"));
  CHECK(
      contains(error_for("{\"a\": 0}"), "no token for the byte 0x00 (\"\u0100\"): byte-level BPE needs all 256 bytes"));
  std::string without_eot = good.encoder_json.substr(0, good.encoder_json.rfind(", \"<|endoftext|>\"")) + "}";
  CHECK(contains(error_for(without_eot), "has no \"<|endoftext|>\" token"));
}

TEST_CASE("a malformed vocab.bpe is an error naming the file, the line and the fault" * doctest::skip(!kPcre2)) {
  const text_test::TinyVocabulary good = text_test::tiny_vocabulary({{"a", "b"}, {"ab", "c"}});
  auto error_for = [&](const std::string& vocab_bpe) {
    return error_of<tessera::io::FormatError>(
        [&] { text::GPT2Tokenizer::from_strings(good.encoder_json, vocab_bpe, "tiny"); });
  };
  CHECK(contains(error_for("#version: 0.2\na b\nabc\n"),
                 "GPT-2 merges 'tiny (vocab.bpe)': line 3 (byte offset 18): expected a merge rule: two tokens "
                 "separated by one space, found \"abc\""));
  CHECK(contains(error_for("a  b\n"), "line 1 (byte offset 0): expected a merge rule"));
  CHECK(contains(error_for("a b\n\nab c\n"), "line 2 (byte offset 4): an empty line"));
  CHECK(contains(error_for("a zz\n"), "\"zz\" is not a token of the vocabulary"));
  CHECK(contains(error_for("b c\n"), "\"b\" + \"c\" makes \"bc\", which is not a token of the vocabulary"));
  CHECK(contains(error_for("a b\na b\n"), "line 2 (byte offset 4): the rule \"a b\" was already given, at rank 0"));
  CHECK(contains(error_for("a \tb\n"), "the character U+0009, which stands for no byte"));
  // The header line is optional and a CRLF file reads.
  CHECK(text::GPT2Tokenizer::from_strings(good.encoder_json, "a b\r\nab c\r\n").merge_count() == 2);
}

TEST_CASE("vocab.bpe must make each token of encoder.json once: truncated, empty or repeated is an error" *
          doctest::skip(!kPcre2)) {
  // 256 bytes + one token per rule + <|endoftext|>: 260 tokens, 3 rules.
  const text_test::TinyVocabulary good = text_test::tiny_vocabulary({{"a", "b"}, {"ab", "c"}, {"x", "y"}});
  auto error_for = [&](const std::string& vocab_bpe) {
    return error_of<tessera::io::FormatError>(
        [&] { text::GPT2Tokenizer::from_strings(good.encoder_json, vocab_bpe, "tiny"); });
  };
  CHECK(text::GPT2Tokenizer::from_strings(good.encoder_json, good.vocab_bpe).merge_count() == 3);
  const std::string need = "tiny (encoder.json) has 260 tokens, which need 3 (256 bytes, one token per rule, <|endoftext|>)";
  CHECK(contains(error_for(""), "GPT-2 merges 'tiny (vocab.bpe)': byte offset 0: the file is empty; " + need));
  CHECK(contains(error_for("#version: 0.2\n"), "at byte offset 14 (the end of the file, after line 1): 0 merge rules, but " + need));
  // Cut after the second rule, at a line's end or inside the third.
  CHECK(contains(error_for("#version: 0.2\na b\nab c\n"),
                 "at byte offset 23 (the end of the file, after line 3): 2 merge rules, but " + need +
                     ": is the file truncated?"));
  CHECK(contains(error_for("#version: 0.2\na b\nab c\nx"), "line 4 (byte offset 23): expected a merge rule"));
  // Two rules making one token ("ab" + "c" and "a" + "bc" would both make "abc").
  const text_test::TinyVocabulary twice = text_test::tiny_vocabulary({{"a", "b"}, {"b", "c"}, {"ab", "c"}});
  CHECK(contains(error_of<tessera::io::FormatError>([&] {
                   text::GPT2Tokenizer::from_strings(twice.encoder_json, "a b\nb c\nab c\na bc\n", "tiny");
                 }),
                 "line 4 (byte offset 13): \"a\" + \"bc\" makes \"abc\", which the rule on line 3 already makes"));
}

TEST_CASE("tokenizer files are read only when they are regular files of at most 8 MiB" * doctest::skip(!kPcre2)) {
  tessera::testing::TempDir dir;
  const text_test::TinyVocabulary good = text_test::tiny_vocabulary({{"a", "b"}});
  tessera::testing::write_file_bytes(dir.file("vocab.bpe"), good.vocab_bpe);
  // 9 MiB of encoder.json: refused unread, whatever it holds.
  std::string big = good.encoder_json;
  big.insert(big.size() - 1, std::string((9 << 20) - big.size(), ' '));
  tessera::testing::write_file_bytes(dir.file("encoder.json"), big);
  CHECK(contains(error_of<tessera::io::FormatError>([&] { text::GPT2Tokenizer tokenizer(dir.path()); }),
                 dir.file("encoder.json") + ": byte 0: the file is 9437184 bytes, over the 8388608-byte limit for a "
                                            "GPT-2 tokenizer file"));
  // Within the size, JSON that would take more than 32 times its size is refused part-way.
  std::string hostile = "{\"x\": [0";
  while (hostile.size() < (2 << 20)) hostile += ",0";
  tessera::testing::write_file_bytes(dir.file("encoder.json"), hostile + "]}");
  CHECK(contains(error_of<tessera::io::FormatError>([&] { text::GPT2Tokenizer tokenizer(dir.path()); }),
                 "bytes of memory, the limit for this document"));
  // A FIFO is refused, not waited on.
  std::filesystem::remove(dir.file("encoder.json"));
  REQUIRE(::mkfifo(dir.file("encoder.json").c_str(), 0644) == 0);
  CHECK(contains(error_of<tessera::io::IOError>([&] { text::GPT2Tokenizer tokenizer(dir.path()); }),
                 "is a FIFO (named pipe), not a regular file"));
}

TEST_CASE("missing tokenizer files name the file and the script that fetches them" * doctest::skip(!kPcre2)) {
  tessera::testing::TempDir dir;
  const std::string message = error_of<tessera::io::IOError>([&] { text::GPT2Tokenizer tokenizer(dir.path()); });
  CHECK(contains(message, "GPT-2 tokenizer: cannot open '" + dir.file("encoder.json") + "': No such file or directory"));
  CHECK(contains(message, "scripts/get-gpt2-tokenizer"));
  CHECK(
      contains(error_of<tessera::io::IOError>([&] { text::GPT2Tokenizer(dir.path(), dir.path()); }), "is a directory"));
}

TEST_CASE("without PCRE2 the tokenizer says what to install" * doctest::skip(kPcre2)) {
  CHECK(contains(error_of<tessera::NotCompiledError>([] { text::PreTokenizer split; }), "libpcre2-dev"));
}
