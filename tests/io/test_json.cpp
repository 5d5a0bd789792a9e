// The strict JSON parser and compact writer behind safetensors headers: values, order,
// escapes, numbers, the errors (with their byte offsets) and the nesting limit.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <tessera/io/json.h>

namespace json = tessera::io::json;
using tessera::io::FormatError;

namespace {

// The offset a parse error reports, or -1 when the text parses.
int64_t error_offset(std::string_view text, int max_depth = 64) {
  try {
    json::parse(text, max_depth);
  } catch (const json::ParseError& e) {
    return static_cast<int64_t>(e.offset());
  }
  return -1;
}

}  // namespace

TEST_CASE("json: values, insertion order and source offsets") {
  json::Value v = json::parse(R"( {"b": [1, -2, 3.5, 1e2], "a": {"x": true, "y": null}, "s": "hi"} )");
  REQUIRE(v.is_object());
  const json::Object& members = v.as_object();
  REQUIRE(members.size() == 3);
  CHECK(members[0].first == "b");  // insertion order, not sorted
  CHECK(members[1].first == "a");
  CHECK(members[2].first == "s");
  const json::Array& b = v.at("b").as_array();
  CHECK(b[0].is_int());
  CHECK(b[0].as_int() == 1);
  CHECK(b[1].as_int() == -2);
  CHECK(b[2].kind() == json::Kind::number);
  CHECK(b[2].as_double() == 3.5);
  CHECK(b[3].kind() == json::Kind::number);  // an exponent makes a double even when integral
  CHECK(b[3].as_double() == 100.0);
  CHECK(v.at("a").at("x").as_bool());
  CHECK(v.at("a").at("y").is_null());
  CHECK(v.at("s").as_string() == "hi");
  CHECK(v.find("missing") == nullptr);
  CHECK(v.source_offset() == 1);
  CHECK(v.at("b").source_offset() == 7);
  CHECK(b[1].source_offset() == 11);
  CHECK(v.at("s").source_offset() == 60);
}

TEST_CASE("json: integers keep all 64 bits; beyond int64 they become doubles") {
  CHECK(json::parse("9223372036854775807").as_int() == std::numeric_limits<int64_t>::max());
  CHECK(json::parse("-9223372036854775808").as_int() == std::numeric_limits<int64_t>::min());
  json::Value big = json::parse("9223372036854775808");
  CHECK(big.kind() == json::Kind::number);
  CHECK(big.as_double() == 9223372036854775808.0);
  CHECK(json::parse("-0").as_int() == 0);
  CHECK(json::parse("0.1").as_double() == 0.1);
}

TEST_CASE("json: string escapes, \\u, surrogate pairs and raw UTF-8") {
  CHECK(json::parse(R"("a\"b\\c\/d\b\f\n\r\t")").as_string() == "a\"b\\c/d\b\f\n\r\t");
  CHECK(json::parse(R"("\u00e9\u0041")").as_string() == "\xc3\xa9" "A");
  CHECK(json::parse(R"("\ud83d\ude00")").as_string() == "\xf0\x9f\x98\x80");  // U+1F600
  CHECK(json::parse("\"caf\xc3\xa9\"").as_string() == "caf\xc3\xa9");
  CHECK(json::parse(R"("\u0000")").as_string() == std::string(1, '\0'));
}

TEST_CASE("json: writing is compact, ordered and round-trips") {
  json::Value v = json::Object{};
  v.set("z", 1);
  v.set("a", json::Array{1, 2.5, "x", nullptr, true});
  v.set("z", 2);  // replaces, keeps its place
  CHECK(json::write(v) == R"({"z":2,"a":[1,2.5,"x",null,true]})");
  CHECK(json::write(json::Value(2.0)) == "2.0");  // stays a double when read back
  CHECK(json::write(json::Value(0.1)) == "0.1");  // shortest round-trip form
  CHECK(json::write(json::Value(1e300)) == "1e+300");
  CHECK(json::write(json::Value("q\"\\\n\x01\xc3\xa9")) == "\"q\\\"\\\\\\n\\u0001\xc3\xa9\"");
  std::string text = R"({"name":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"e":[],"o":{}})";
  CHECK(json::write(json::parse(text)) == text);
  for (double x : {0.1, 1.0 / 3.0, -1e-310, 6.02214076e23, 5e-324}) {
    CHECK(json::parse(json::write(json::Value(x))).as_double() == x);
  }
  CHECK_THROWS_AS(json::write(json::Value(std::nan(""))), tessera::ValueError);
  CHECK_THROWS_AS(json::write(json::Value(std::numeric_limits<double>::infinity())), tessera::ValueError);
  CHECK_THROWS_AS(json::write(json::Value("\xff")), tessera::ValueError);
}

TEST_CASE("json: invalid text is a ParseError at the right byte") {
  struct Case {
    std::string text;
    int64_t offset;
  };
  const Case cases[] = {
      {"", 0},
      {"   ", 3},
      {"{", 1},
      {"{\"a\"", 4},
      {"{\"a\":}", 5},
      {"{\"a\":1,}", 7},
      {"[1,]", 3},
      {"[1 2]", 3},
      {"{a:1}", 1},
      {"01", 1},
      {"-", 1},
      {"1.", 2},
      {"1e", 2},
      {".5", 0},
      {"+1", 0},
      {"NaN", 0},
      {"Infinity", 0},
      {"tru", 3},
      {"nul", 3},
      {"1e999", 0},
      {"\"abc", 4},
      {"\"a\\x\"", 3},
      {"\"\\u12g4\"", 5},
      {"\"\\ud800\"", 7},      // high surrogate without its low half
      {"\"\\ud800\\u0041\"", 7},  // followed by something else
      {"\"\\udc00\"", 1},      // low surrogate alone
      {"\"a\tb\"", 2},         // raw control character
      {"\"\xff\"", 1},         // not UTF-8
      {"\"\xc0\x80\"", 1},     // overlong encoding
      {"\"\xed\xa0\x80\"", 1},  // an encoded surrogate
      {"\"\xe2\x82\"", 1},     // truncated sequence
      {"{\"a\":1,\"a\":2}", 7},  // repeated key
      {"{} x", 3},
      {"1 2", 2},
      {std::string("[1]\0", 4), 3},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    CHECK(error_offset(c.text) == c.offset);
  }
  try {
    json::parse("[1, 2,, 3]");
    FAIL("expected a ParseError");
  } catch (const FormatError& e) {  // ParseError is a FormatError
    CHECK(std::string(e.what()) == "invalid JSON at byte 6: expected a value (object, array, string, number, true, "
                                   "false or null), found ','");
  }
  try {
    json::parse("{\"k\": 1, \"k\": 2}");
    FAIL("expected a ParseError");
  } catch (const json::ParseError& e) {
    CHECK(e.reason() == "expected unique keys, but \"k\" repeats");
  }
}

TEST_CASE("json: nesting deeper than the limit is refused without deep recursion") {
  auto nested = [](int depth) { return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']'); };
  CHECK(error_offset(nested(64)) == -1);
  CHECK(error_offset(nested(65)) == 64);
  CHECK(error_offset(nested(3), 2) == 2);
  // A hostile header: a million brackets stop at the limit, not at the end of the stack.
  CHECK(error_offset(std::string(1'000'000, '[')) == 64);
  CHECK(error_offset(std::string(1'000'000, '{')) == 1);  // a key is expected first
}

TEST_CASE("json: asking a value for the wrong kind names what was found and where") {
  json::Value v = json::parse(R"({"shape": "oops"})");
  try {
    (void)v.at("shape").as_array();
    FAIL("expected a FormatError");
  } catch (const FormatError& e) {
    CHECK(std::string(e.what()) == "JSON value at byte 10: expected an array, found a string");
  }
  CHECK_THROWS_AS((void)v.at("nope"), FormatError);
  CHECK_THROWS_AS((void)json::Value(1.5).as_int(), FormatError);
  CHECK(json::Value(7).as_double() == 7.0);
}

TEST_CASE("json: the header example") {
  json::Value header = json::parse(R"({"w": {"shape": [2, 3]}})");
  int64_t rows = header.at("w").at("shape").as_array()[0].as_int();
  CHECK(rows == 2);
  CHECK(json::write(header) == R"({"w":{"shape":[2,3]}})");
}
