// Errors thrown by Tessera. The library never aborts: every failure is an exception whose
// message names what was wrong (shapes, dtypes, devices, files, byte offsets).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ShapeError : public Error { using Error::Error; };
class DTypeError : public Error { using Error::Error; };
class DeviceError : public Error { using Error::Error; };
class IndexError : public Error { using Error::Error; };
class ValueError : public Error { using Error::Error; };
// A feature that was not compiled in (CUDA, MPI, ...) was asked for at run time.
class NotCompiledError : public Error { using Error::Error; };

// The parts written one after another into a string, as c10::str: a message built from
// numbers, shapes and names (ts::str("--epochs must be >= 1, got ", epochs)).
template <class... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

namespace detail {
// The library's own spelling of str(), used by TS_CHECK and throughout src/.
template <class... Parts>
std::string concat(const Parts&... parts) {
  return str(parts...);
}
}  // namespace detail

}  // namespace tessera

// TS_CHECK(condition, ErrorType, message parts...): throws ErrorType(concat(parts...)).
#define TS_CHECK(condition, ErrorType, ...)                            \
  do {                                                                  \
    if (!(condition)) throw ErrorType(::tessera::detail::concat(__VA_ARGS__)); \
  } while (false)
