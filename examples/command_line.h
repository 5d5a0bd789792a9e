// Command-line parsing shared by the examples: flags with values, numbers checked as they
// are read (integers as integers, in decimal and in range; floating values finite), --help,
// and usage errors that name the flag and the text and end with status 2.
//
//   example::CommandLine args("mnist", argc, argv, kUsage);
//   while (args.next()) {
//     if (args.flag() == "--epochs") epochs = args.number<int64_t>();
//     else if (args.flag() == "--data") data = args.value();
//     else args.unknown();
//   }
#pragma once

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <string>
#include <type_traits>

namespace example {

class CommandLine {
 public:
  CommandLine(std::string program, int argc, char** argv, const char* usage)
      : program_(std::move(program)), argc_(argc), argv_(argv), usage_(usage) {}

  // Moves to the next flag; false after the last. --help and -h print the usage and exit.
  bool next() {
    if (++index_ >= argc_) return false;
    flag_ = argv_[index_];
    if (flag_ == "--help" || flag_ == "-h") {
      std::cout << usage_;
      std::exit(0);
    }
    return true;
  }
  const std::string& flag() const { return flag_; }

  // The current flag's value: the next argument.
  std::string value() {
    if (index_ + 1 >= argc_) error(flag_ + " needs a value");
    return argv_[++index_];
  }

  // The value as a T. Integer types: a decimal integer from 0 to T's maximum, read exactly
  // (no exponent, no hex, no fraction: "1e30", "0x10" and "3.0" are errors, and 2^53 + 1
  // keeps its last digit). Floating types: a finite decimal number ("1e-3"; not inf or nan).
  template <class T>
  T number() {
    const std::string text = value();
    T parsed{};
    const auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), parsed);
    const bool whole = !text.empty() && status == std::errc() && end == text.data() + text.size();
    if constexpr (std::is_integral_v<T>) {
      if (!whole || parsed < 0) {
        error(flag_ + " expects an integer from 0 to " + std::to_string(std::numeric_limits<T>::max()) + ", got '" +
              text + "'");
      }
    } else {
      if (!whole || !std::isfinite(parsed)) error(flag_ + " expects a finite number, got '" + text + "'");
    }
    return parsed;
  }

  [[noreturn]] void unknown() const { error("unknown option '" + flag_ + "'"); }

  [[noreturn]] void error(const std::string& message) const {
    std::cerr << program_ << ": " << message << "\n(see " << program_ << " --help)\n";
    std::exit(2);
  }

 private:
  std::string program_;
  int argc_;
  char** argv_;
  const char* usage_;
  int index_ = 0;
  std::string flag_;
};

}  // namespace example
