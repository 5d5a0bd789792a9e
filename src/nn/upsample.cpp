#include "tessera/nn/upsample.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace tessera::nn {

namespace {

// Python's repr of a float: the shortest digits that read back as the value, and integral
// values keep their ".0".
std::string python_float(double value) {
  std::string text;
  for (int precision = 1; precision <= 17; ++precision) {
    std::ostringstream out;
    out.precision(precision);
    out << value;
    text = out.str();
    if (std::strtod(text.c_str(), nullptr) == value) break;
  }
  if (std::isfinite(value) && text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

// One value as itself, several as a Python tuple.
template <class T, class Format>
std::string python_value(const std::vector<T>& values, Format format) {
  if (values.size() == 1) return format(values[0]);
  std::string text = "(";
  for (size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + format(values[i]);
  return text + ")";
}

}  // namespace

std::string Upsample::extra_repr() const {
  const std::string what =
      !options_.scale_factor.empty()
          ? "scale_factor=" + python_value(options_.scale_factor, python_float)
          : "size=" + python_value(options_.size, [](int64_t v) { return std::to_string(v); });
  return what + ", mode='" + options_.mode + "'";
}

}  // namespace tessera::nn
