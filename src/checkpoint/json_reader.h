// Reading checkpoint metadata JSON with errors that name the file and the byte offset of
// the offending value: every accessor checks the kind and range of what it returns, since
// the file may be corrupt or hostile. Internal to src/checkpoint.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "tessera/io/errors.h"
#include "tessera/io/json.h"

namespace tessera::checkpoint::detail {

namespace json = io::json;

class JsonReader {
 public:
  // `file` names the source in messages; `base` is added to every value's source offset
  // (the JSON's position in the file).
  JsonReader(std::string file, uint64_t base = 0) : file_(std::move(file)), base_(base) {}

  const std::string& file() const { return file_; }

  template <class... Parts>
  [[noreturn]] void fail(const json::Value& at, const Parts&... parts) const {
    throw io::FormatError(tessera::detail::concat(file_, ": byte ", base_ + at.source_offset(), ": ", parts...));
  }

  const json::Value& member(const json::Value& object, std::string_view key, std::string_view where) const {
    if (!object.is_object()) fail(object, where, ": expected an object, found ", json::kind_name(object.kind()));
    const json::Value* found = object.find(key);
    if (found == nullptr) fail(object, where, ": missing \"", key, "\"");
    return *found;
  }
  const json::Value* optional_member(const json::Value& object, std::string_view key, std::string_view where) const {
    if (!object.is_object()) fail(object, where, ": expected an object, found ", json::kind_name(object.kind()));
    return object.find(key);
  }

  int64_t integer(const json::Value& value, std::string_view what, int64_t min = 0,
                  int64_t max = std::numeric_limits<int64_t>::max()) const {
    if (!value.is_int()) fail(value, what, ": expected an integer, found ", json::kind_name(value.kind()));
    int64_t number = value.as_int();
    if (number < min || number > max) fail(value, what, ": ", number, " is outside [", min, ", ", max, "]");
    return number;
  }
  // An unsigned 64-bit value: an integer, or a decimal string above int64's range.
  uint64_t unsigned64(const json::Value& value, std::string_view what) const {
    if (value.is_int()) return static_cast<uint64_t>(integer(value, what));
    if (value.is_string()) {
      const std::string& text = value.as_string();
      uint64_t number = 0;
      bool ok = !text.empty() && text.size() <= 20;
      for (char c : text) {
        ok = ok && c >= '0' && c <= '9' && !__builtin_mul_overflow(number, 10u, &number) &&
             !__builtin_add_overflow(number, static_cast<uint64_t>(c - '0'), &number);
      }
      if (ok) return number;
    }
    fail(value, what, ": expected an unsigned 64-bit integer");
  }
  const std::string& string(const json::Value& value, std::string_view what) const {
    if (!value.is_string()) fail(value, what, ": expected a string, found ", json::kind_name(value.kind()));
    return value.as_string();
  }
  const json::Array& array(const json::Value& value, std::string_view what) const {
    if (!value.is_array()) fail(value, what, ": expected an array, found ", json::kind_name(value.kind()));
    return value.as_array();
  }
  const json::Object& object(const json::Value& value, std::string_view what) const {
    if (!value.is_object()) fail(value, what, ": expected an object, found ", json::kind_name(value.kind()));
    return value.as_object();
  }

 private:
  std::string file_;
  uint64_t base_;
};

// An unsigned 64-bit value as JSON: an integer where int64 holds it, else a decimal string.
inline json::Value unsigned64_json(uint64_t value) {
  if (value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return static_cast<int64_t>(value);
  return std::to_string(value);
}

}  // namespace tessera::checkpoint::detail
