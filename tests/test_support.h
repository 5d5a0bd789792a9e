// Helpers every suite uses: whether a text contains a phrase, the message of the error an
// action throws, and how far a result is from its reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "tessera/tensor/error.h"
#include "tessera/tensor/tensor.h"

namespace test_support {

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The message of the `ErrorType` that `action` throws, or "" when it throws nothing. Any
// other exception passes through, so the test reports it as the failure it is.
template <typename ErrorType = tessera::Error>
std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const ErrorType& error) {
    return error.what();
  }
  return "";
}

// ||a - b|| / ||b||, the 2-norms over all elements computed in float64 (a zero reference
// divides by 1e-300, not 0): the measure the parity tests (sharded against one rank, GPU
// against CPU) bound.
inline double relative_difference(const tessera::Tensor& a, const tessera::Tensor& b) {
  const tessera::Tensor diff = a.to(tessera::DType::f64) - b.to(tessera::DType::f64);
  const tessera::Tensor reference = b.to(tessera::DType::f64);
  const double norm = std::sqrt((reference * reference).sum().item<double>());
  return std::sqrt((diff * diff).sum().item<double>()) / std::max(norm, 1e-300);
}

}  // namespace test_support
