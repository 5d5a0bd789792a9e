// The JSON parser (recursive descent with a depth limit) and the compact writer.
#include "tessera/io/json.h"

#include <charconv>
#include <cmath>
#include <system_error>
#include <unordered_set>

namespace tessera::io::json {

std::string_view kind_name(Kind kind) {
  switch (kind) {
    case Kind::null: return "null";
    case Kind::boolean: return "a boolean";
    case Kind::integer: return "an integer";
    case Kind::number: return "a non-integral number";
    case Kind::string: return "a string";
    case Kind::array: return "an array";
    case Kind::object: return "an object";
  }
  return "unknown";
}

void Value::wrong_kind(Kind wanted) const {
  throw FormatError(detail::concat("JSON value at byte ", source_offset_, ": expected ", kind_name(wanted),
                                   ", found ", kind_name(kind())));
}

bool Value::as_bool() const {
  if (!is_bool()) wrong_kind(Kind::boolean);
  return std::get<bool>(data_);
}

int64_t Value::as_int() const {
  if (!is_int()) wrong_kind(Kind::integer);
  return std::get<int64_t>(data_);
}

double Value::as_double() const {
  if (is_int()) return static_cast<double>(std::get<int64_t>(data_));
  if (kind() != Kind::number) wrong_kind(Kind::number);
  return std::get<double>(data_);
}

const std::string& Value::as_string() const {
  if (!is_string()) wrong_kind(Kind::string);
  return std::get<std::string>(data_);
}

const Array& Value::as_array() const {
  if (!is_array()) wrong_kind(Kind::array);
  return std::get<Array>(data_);
}

Array& Value::as_array() {
  if (!is_array()) wrong_kind(Kind::array);
  return std::get<Array>(data_);
}

const Object& Value::as_object() const {
  if (!is_object()) wrong_kind(Kind::object);
  return std::get<Object>(data_);
}

Object& Value::as_object() {
  if (!is_object()) wrong_kind(Kind::object);
  return std::get<Object>(data_);
}

const Value* Value::find(std::string_view key) const {
  for (const auto& [name, value] : as_object()) {
    if (name == key) return &value;
  }
  return nullptr;
}

const Value& Value::at(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) {
    throw FormatError(detail::concat("JSON object at byte ", source_offset_, ": no member \"", key, "\""));
  }
  return *value;
}

Value& Value::set(std::string key, Value value) {
  Object& members = as_object();
  for (auto& [name, existing] : members) {
    if (name == key) return existing = std::move(value);
  }
  return members.emplace_back(std::move(key), std::move(value)).second;
}

void Value::push_back(Value value) { as_array().push_back(std::move(value)); }

namespace {

// Length of the UTF-8 sequence starting at text[i] (1-4), or 0 when it is not a valid,
// shortest-form encoding of a scalar value (no surrogates, nothing above U+10FFFF).
size_t utf8_sequence_length(std::string_view text, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length;
  uint32_t code;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2, code = lead & 0x1fu;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3, code = lead & 0x0fu;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4, code = lead & 0x07u;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xc0u) != 0x80u) return 0;
    code = (code << 6) | (byte(i + k) & 0x3fu);
  }
  if (length == 3 && (code < 0x800 || (code >= 0xd800 && code <= 0xdfff))) return 0;
  if (length == 4 && (code < 0x10000 || code > 0x10ffff)) return 0;
  return length;
}

void append_utf8(std::string& out, uint32_t code) {
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xc0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3f));
  } else if (code < 0x10000) {
    out += static_cast<char>(0xe0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (code >> 18));
    out += static_cast<char>(0x80 | ((code >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code & 0x3f));
  }
}

std::string describe_byte(std::string_view text, size_t pos) {
  if (pos >= text.size()) return "the end of the text";
  auto c = static_cast<unsigned char>(text[pos]);
  if (c >= 0x20 && c < 0x7f) return detail::concat("'", static_cast<char>(c), "'");
  static const char* digits = "0123456789abcdef";
  return detail::concat("byte 0x", digits[c >> 4], digits[c & 15]);
}

class Parser {
 public:
  Parser(std::string_view text, const ParseLimits& limits) : text_(text), limits_(limits) {}

  Value parse_document() {
    skip_whitespace();
    Value value = parse_value(0);
    skip_whitespace();
    if (pos_ != text_.size()) fail(pos_, "expected the end of the text after the top-level value");
    return value;
  }

 private:
  [[noreturn]] void fail(size_t at, std::string_view what) const {
    throw ParseError(at, detail::concat(what, ", found ", describe_byte(text_, at)));
  }

  // For errors where the byte found says nothing useful (a repeated key, too deep a nesting).
  [[noreturn]] void reject(size_t at, std::string_view what) const {
    throw ParseError(at, std::string(what));
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_whitespace() {
    while (!at_end() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  void expect_literal(std::string_view literal) {
    for (size_t k = 0; k < literal.size(); ++k) {
      if (pos_ + k >= text_.size() || text_[pos_ + k] != literal[k]) {
        fail(pos_ + k, detail::concat("expected the literal '", literal, "'"));
      }
    }
    pos_ += literal.size();
  }

  // Counts what the values will occupy at most (each Value; a growing vector's old and new
  // buffers while it reallocates, up to twice more per element; keys and their set; string
  // bytes the same way) and refuses a document that would need more than the limit.
  void spend(size_t bytes) {
    used_ += bytes;
    if (used_ > limits_.max_memory_bytes) {
      reject(pos_, detail::concat("its values need more than ", limits_.max_memory_bytes,
                                  " bytes of memory, the limit for this document (corrupt or hostile?)"));
    }
  }

  Value parse_value(int depth) {
    size_t start = pos_;
    spend(sizeof(Value));
    Value value;
    switch (peek()) {
      case '{': value = parse_object(depth); break;
      case '[': value = parse_array(depth); break;
      case '"': value = parse_string(); break;
      case 't':
        expect_literal("true");
        value = true;
        break;
      case 'f':
        expect_literal("false");
        value = false;
        break;
      case 'n': expect_literal("null"); break;
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) {
          value = parse_number();
        } else {
          fail(pos_, "expected a value (object, array, string, number, true, false or null)");
        }
    }
    value.set_source_offset(start);
    return value;
  }

  void enter(int depth) const {
    if (depth + 1 > limits_.max_depth) {
      reject(pos_, detail::concat("expected at most ", limits_.max_depth, " levels of nesting"));
    }
  }

  Value parse_object(int depth) {
    enter(depth);
    ++pos_;  // '{'
    Value object = Object{};
    Object& members = object.as_object();
    std::unordered_set<std::string> keys;  // a set, so that many keys do not cost n^2
    skip_whitespace();
    if (peek() == '}') {
      ++pos_;
      return object;
    }
    while (true) {
      skip_whitespace();
      size_t key_start = pos_;
      if (peek() != '"') fail(pos_, "expected a string key");
      std::string key = parse_string().as_string();
      spend(3 * sizeof(Member) + sizeof(std::string) + 2 * key.size() + 32);  // the member, its slack, the set's node
      if (!keys.insert(key).second) {
        reject(key_start, detail::concat("expected unique keys, but \"", key, "\" repeats"));
      }
      skip_whitespace();
      if (peek() != ':') fail(pos_, "expected ':' after an object key");
      ++pos_;
      skip_whitespace();
      Value value = parse_value(depth + 1);
      members.emplace_back(std::move(key), std::move(value));
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        return object;
      }
      fail(pos_, "expected ',' or '}' after an object member");
    }
  }

  Value parse_array(int depth) {
    enter(depth);
    ++pos_;  // '['
    Value array = Array{};
    skip_whitespace();
    if (peek() == ']') {
      ++pos_;
      return array;
    }
    while (true) {
      skip_whitespace();
      spend(2 * sizeof(Value));  // a growing vector's spare capacity and, while it grows, its old buffer
      array.push_back(parse_value(depth + 1));
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return array;
      }
      fail(pos_, "expected ',' or ']' after an array element");
    }
  }

  uint32_t parse_hex4() {
    uint32_t code = 0;
    for (int k = 0; k < 4; ++k) {
      char c = peek();
      uint32_t digit;
      if (c >= '0' && c <= '9') {
        digit = static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        digit = static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        digit = static_cast<uint32_t>(c - 'A' + 10);
      } else {
        fail(pos_, "expected four hexadecimal digits after \\u");
      }
      code = code * 16 + digit;
      ++pos_;
    }
    return code;
  }

  Value parse_string() {
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (at_end()) fail(pos_, "expected a closing '\"'");
      if (out.size() % 4096 == 4095) spend(3 * 4096);
      auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail(pos_, "expected no raw control characters in a string (escape them)");
      if (c == '\\') {
        parse_escape(out);
        continue;
      }
      size_t length = utf8_sequence_length(text_, pos_);
      if (length == 0) fail(pos_, "expected valid UTF-8 in a string");
      out.append(text_.substr(pos_, length));
      pos_ += length;
    }
  }

  void parse_escape(std::string& out) {
    size_t escape_start = pos_;
    ++pos_;  // '\'
    char c = peek();
    ++pos_;
    switch (c) {
      case '"': out += '"'; return;
      case '\\': out += '\\'; return;
      case '/': out += '/'; return;
      case 'b': out += '\b'; return;
      case 'f': out += '\f'; return;
      case 'n': out += '\n'; return;
      case 'r': out += '\r'; return;
      case 't': out += '\t'; return;
      case 'u': break;
      default: fail(escape_start + 1, "expected one of \" \\ / b f n r t u after a backslash");
    }
    uint32_t code = parse_hex4();
    if (code >= 0xdc00 && code <= 0xdfff) reject(escape_start, "expected a high surrogate before a low surrogate");
    if (code >= 0xd800 && code <= 0xdbff) {
      if (peek() != '\\' || pos_ + 1 >= text_.size() || text_[pos_ + 1] != 'u') {
        fail(pos_, "expected a \\u low surrogate after a high surrogate");
      }
      size_t low_start = pos_;
      pos_ += 2;
      uint32_t low = parse_hex4();
      if (low < 0xdc00 || low > 0xdfff) reject(low_start, "expected a low surrogate (\\udc00-\\udfff)");
      code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
    }
    append_utf8(out, code);
  }

  Value parse_number() {
    size_t start = pos_;
    auto digits = [&] {
      size_t first = pos_;
      while (!at_end() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ - first;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (peek() >= '0' && peek() <= '9') fail(pos_, "expected no leading zeros in a number");
    } else if (digits() == 0) {
      fail(pos_, "expected a digit");
    }
    bool integral = true;
    if (peek() == '.') {
      integral = false;
      ++pos_;
      if (digits() == 0) fail(pos_, "expected a digit after the decimal point");
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digits() == 0) fail(pos_, "expected a digit in the exponent");
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (integral) {
      int64_t integer = 0;
      auto [end, error] = std::from_chars(first, last, integer);
      if (error == std::errc() && end == last) return integer;
      // Out of int64's range: kept as a double, as JSON allows.
    }
    double number = 0;
    auto [end, error] = std::from_chars(first, last, number);
    if (error == std::errc::result_out_of_range || (error == std::errc() && !std::isfinite(number))) {
      reject(start, "expected a number within the range of a double");
    }
    if (error != std::errc() || end != last) fail(start, "expected a number");
    return number;
  }

  std::string_view text_;
  ParseLimits limits_;
  size_t used_ = 0;
  size_t pos_ = 0;
};

void write_string(std::string& out, std::string_view text) {
  static const char* hex = "0123456789abcdef";
  out += '"';
  for (size_t i = 0; i < text.size();) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      size_t length = utf8_sequence_length(text, i);
      TS_CHECK(length != 0, ValueError, "json::write: string has invalid UTF-8 at byte ", i, ": \"", text, "\"");
      out.append(text.substr(i, length));
      i += length;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

void write_value(std::string& out, const Value& value) {
  switch (value.kind()) {
    case Kind::null: out += "null"; return;
    case Kind::boolean: out += value.as_bool() ? "true" : "false"; return;
    case Kind::integer: out += std::to_string(value.as_int()); return;
    case Kind::number: {
      double number = value.as_double();
      TS_CHECK(std::isfinite(number), ValueError, "json::write: ", number, " has no JSON form");
      char buffer[32];
      auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, number);
      std::string_view text(buffer, static_cast<size_t>(end - buffer));
      out += text;
      // Keep it a non-integral number when read back: 2.0 is written "2.0", not "2".
      if (text.find_first_of(".e") == std::string_view::npos) out += ".0";
      return;
    }
    case Kind::string: write_string(out, value.as_string()); return;
    case Kind::array: {
      out += '[';
      bool first = true;
      for (const Value& element : value.as_array()) {
        if (!first) out += ',';
        first = false;
        write_value(out, element);
      }
      out += ']';
      return;
    }
    case Kind::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, member] : value.as_object()) {
        if (!first) out += ',';
        first = false;
        write_string(out, key);
        out += ':';
        write_value(out, member);
      }
      out += '}';
      return;
    }
  }
}

}  // namespace

Value parse(std::string_view text, int max_depth) { return parse(text, ParseLimits{.max_depth = max_depth}); }

Value parse(std::string_view text, const ParseLimits& limits) { return Parser(text, limits).parse_document(); }

ParseLimits file_limits(size_t text_bytes) {
  return {.max_depth = 64, .max_memory_bytes = kFileMemoryPerByte * text_bytes + (size_t{1} << 20)};
}

std::string write(const Value& value) {
  std::string out;
  write_value(out, value);
  return out;
}

}  // namespace tessera::io::json
