// A small, strict JSON value with a parser and a compact writer: what safetensors headers
// (and the golden-test case tables) need, and nothing more.
//
// Strict means RFC 8259 and no extensions: no comments, trailing commas, NaN, leading
// zeros or invalid UTF-8; lone surrogates in \u escapes and duplicate object keys are
// errors too. Objects keep their members in insertion order, so a header written from a
// StateDict lists tensors in the dict's order. Numbers without fraction or exponent that
// fit int64 are integers; every other number is a double. Nesting deeper than
// `max_depth` is refused, so hostile input cannot exhaust the stack.
//
//   namespace json = tessera::io::json;
//   json::Value header = json::parse(R"({"w": {"shape": [2, 3]}})");
//   int64_t rows = header.at("w").at("shape").as_array()[0].as_int();   // 2
//   std::string text = json::write(header);        // {"w":{"shape":[2,3]}}
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "tessera/io/errors.h"

namespace tessera::io::json {

class Value;
using Array = std::vector<Value>;
using Member = std::pair<std::string, Value>;
using Object = std::vector<Member>;  // insertion order

enum class Kind : uint8_t { null, boolean, integer, number, string, array, object };
std::string_view kind_name(Kind kind);  // "null", "an integer", "an object", ...

class Value {
 public:
  Value() = default;  // null
  Value(std::nullptr_t) {}                      // NOLINT: implicit on purpose, like JSON literals
  Value(bool value) : data_(value) {}           // NOLINT
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  Value(T value) : data_(static_cast<int64_t>(value)) {}  // NOLINT
  Value(double value) : data_(value) {}         // NOLINT
  Value(std::string value) : data_(std::move(value)) {}   // NOLINT
  Value(std::string_view value) : data_(std::string(value)) {}  // NOLINT
  Value(const char* value) : data_(std::string(value)) {}  // NOLINT
  Value(Array value) : data_(std::move(value)) {}  // NOLINT
  Value(Object value) : data_(std::move(value)) {}  // NOLINT

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_null() const { return kind() == Kind::null; }
  bool is_bool() const { return kind() == Kind::boolean; }
  bool is_int() const { return kind() == Kind::integer; }
  bool is_number() const { return kind() == Kind::integer || kind() == Kind::number; }
  bool is_string() const { return kind() == Kind::string; }
  bool is_array() const { return kind() == Kind::array; }
  bool is_object() const { return kind() == Kind::object; }

  // The value as a C++ type; FormatError naming the kind found and the source offset
  // otherwise. as_double accepts integers too.
  bool as_bool() const;
  int64_t as_int() const;
  double as_double() const;
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const Object& as_object() const;
  Object& as_object();

  // Object access. find: the member's value or null when absent; at: FormatError when absent.
  const Value* find(std::string_view key) const;
  const Value& at(std::string_view key) const;
  // Replaces the member `key` or appends it (keeping insertion order).
  Value& set(std::string key, Value value);
  // Appends to an array.
  void push_back(Value value);

  // Where this value began in the text it was parsed from (0 for values built in code).
  size_t source_offset() const { return source_offset_; }
  void set_source_offset(size_t offset) { source_offset_ = offset; }

  // Equal content; source offsets are ignored, and 1 differs from 1.0.
  friend bool operator==(const Value& a, const Value& b) { return a.data_ == b.data_; }

 private:
  [[noreturn]] void wrong_kind(Kind wanted) const;
  std::variant<std::nullptr_t, bool, int64_t, double, std::string, Array, Object> data_;
  size_t source_offset_ = 0;
};

// A parse error: offset() is the byte in the text where parsing failed and reason() what
// was expected there, so that callers can restate both in their own terms (a safetensors
// reader adds the file name and the 8 bytes before the header).
class ParseError : public FormatError {
 public:
  ParseError(size_t offset, const std::string& reason)
      : FormatError(detail::concat("invalid JSON at byte ", offset, ": ", reason)), offset_(offset), reason_(reason) {}
  size_t offset() const { return offset_; }
  const std::string& reason() const { return reason_; }

 private:
  size_t offset_;
  std::string reason_;
};

struct ParseLimits {
  int max_depth = 64;
  // What the parsed values may occupy (estimated as they are built: values, keys, strings
  // and the slack of growing arrays); beyond it, a ParseError. Unlimited by default.
  size_t max_memory_bytes = SIZE_MAX;
};

// Parses one JSON value followed only by whitespace. Throws ParseError naming the byte
// offset and what was expected there.
Value parse(std::string_view text, int max_depth = 64);
Value parse(std::string_view text, const ParseLimits& limits);

// The limits for a document read from a file (a safetensors header, checkpoint metadata):
// its values may take kFileMemoryPerByte times its size (plus 1 MiB), so a hostile file of
// "[0,0,0,..." (estimated at up to 144 bytes of values per 2 bytes of text) is refused
// part-way. Real headers and metadata are estimated at 20 to 27 times theirs (safetensors
// headers of GPT-2 and the MNIST network, MNIST checkpoint metadata; long CRC lists less).
inline constexpr size_t kFileMemoryPerByte = 32;
ParseLimits file_limits(size_t text_bytes);

// Compact JSON (no spaces), members in insertion order, non-ASCII UTF-8 written as is.
// Doubles are written in their shortest round-trip form; NaN, infinities and strings that
// are not valid UTF-8 have no JSON form and throw ValueError.
std::string write(const Value& value);

}  // namespace tessera::io::json
