// Helpers every suite uses to check error messages: whether a text contains a phrase, and
// the message of the error an action throws.
#pragma once

#include <functional>
#include <string>

#include "tessera/tensor/error.h"

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

}  // namespace test_support
