// Command-line parsing shared by the examples: flags with values, numbers checked as they
// are read, --help, and usage errors that name the flag and end with status 2.
//
//   example::CommandLine args("mnist", argc, argv, kUsage);
//   while (args.next()) {
//     if (args.flag() == "--epochs") epochs = args.number<int64_t>();
//     else if (args.flag() == "--data") data = args.value();
//     else args.unknown();
//   }
#pragma once

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
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

  // The value as a number; integer types take non-negative integers only.
  template <class T>
  T number() {
    std::string text = value();
    try {
      size_t used = 0;
      double parsed = std::stod(text, &used);
      if (used != text.size()) throw std::invalid_argument(text);
      if constexpr (std::is_integral_v<T>) {
        if (parsed != std::floor(parsed) || parsed < 0) throw std::invalid_argument(text);
      }
      return static_cast<T>(parsed);
    } catch (const std::exception&) {
      error(flag_ + " expects a " + (std::is_integral_v<T> ? "non-negative integer" : "number") + ", got '" + text + "'");
    }
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
