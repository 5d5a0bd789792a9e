// Command-line parsing shared by the examples and benchmarks.
//
// Flags: each flag declared once (name, the field it sets, help); the usage text, with every
// default printed from its field's initial value, and the parsing both come from that table,
// as Python's argparse does for a PyTorch script:
//
//   Options o;
//   example::Flags flags("mnist", "Trains PyTorch's MNIST example network with FSDP.");
//   flags.value("--epochs", o.epochs, "N", "epochs to train");         // "[14]", from o.epochs
//   flags.choice("--optimizer", o.optimizer, {"adadelta", "sgd", "adam"}, "the optimizer");
//   flags.toggle("--dry-run", o.dry_run, "one batch, then stop");
//   flags.parse(argc, argv);
//   if (o.epochs == 0) flags.error("--epochs must be positive");    // checks across flags
//
// CommandLine: the reader underneath (flags with values, numbers checked as they are read:
// integers as integers, in decimal and in range; floating values finite), which the benchmarks
// use directly. --help, and usage errors naming the flag and the text, end the program by
// throwing CommandLineExit, which example::main_reporting_errors (main.h) turns into the output
// and the status (0 for --help, 2 for a usage error), so no parser calls exit().
#pragma once

#include <charconv>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace example {

// How the command line ends the program: text for stdout (status 0: --help) or stderr (a usage
// error, status 2).
struct CommandLineExit {
  int status;
  std::string text;
};

// "<program>: <message>\n(see <program> --help)": a usage error, status 2.
[[noreturn]] inline void usage_error(const std::string& program, const std::string& message) {
  throw CommandLineExit{2, program + ": " + message + "\n(see " + program + " --help)\n"};
}

class CommandLine {
 public:
  CommandLine(std::string program, int argc, char** argv, std::string usage)
      : program_(std::move(program)), argc_(argc), argv_(argv), usage_(std::move(usage)) {}

  // Moves to the next flag; false after the last. --help and -h end the program with the usage.
  bool next() {
    if (++index_ >= argc_) return false;
    flag_ = argv_[index_];
    if (flag_ == "--help" || flag_ == "-h") throw CommandLineExit{0, usage_};
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
  [[noreturn]] void error(const std::string& message) const { usage_error(program_, message); }

 private:
  std::string program_;
  int argc_;
  char** argv_;
  std::string usage_;
  int index_ = 0;
  std::string flag_;
};

// What the usage says a flag's default is: without it, the field's initial value (nothing for
// an empty string, an unset optional or a switch); with it, this text ("" shows none).
struct Shown {
  std::optional<std::string> default_text;
};

class Flags {
 public:
  // description: the paragraph under the usage line; epilogue: text after the flags.
  Flags(std::string program, std::string description, std::string epilogue = {})
      : program_(std::move(program)), description_(std::move(description)), epilogue_(std::move(epilogue)) {}

  // A heading ("data:") over the flags declared after it.
  void section(std::string title) {
    Entry heading;
    heading.heading = std::move(title);
    entries_.push_back(std::move(heading));
  }

  // A flag with a value, read into field: strings as given, numbers as CommandLine::number
  // reads them; an optional field is set when the flag is given.
  template <class T>
  void value(std::string name, T& field, std::string metavar, std::string help, Shown shown = {}) {
    add(std::move(name), std::move(metavar), std::move(help), shown.default_text.value_or(printed(field)),
        [&field](CommandLine& args) { field = read_as<T>(args); });
  }

  // A value from a fixed set, checked as it is read: "--dtype must be one of float32, float64, got 'x'".
  // The usage shows the set as argparse does ("--dtype {float32,float64}").
  void choice(std::string name, std::string& field, std::vector<std::string> allowed, std::string help,
              Shown shown = {}) {
    std::string metavar = "{", listed;
    for (const std::string& option : allowed) {
      metavar += (metavar.size() > 1 ? "," : "") + option;
      listed += (listed.empty() ? "" : ", ") + option;
    }
    metavar += "}";
    add(std::move(name), std::move(metavar), std::move(help), shown.default_text.value_or(field),
        [&field, allowed = std::move(allowed), listed](CommandLine& args) {
          std::string text = args.value();
          for (const std::string& option : allowed) {
            if (text == option) {
              field = std::move(text);
              return;
            }
          }
          args.error(args.flag() + " must be one of " + listed + ", got '" + text + "'");
        });
  }

  // A switch: given, it sets field to true.
  void toggle(std::string name, bool& field, std::string help) {
    add(std::move(name), "", std::move(help), "", [&field](CommandLine&) { field = true; });
  }

  // A value read by a function of one's own; a tessera or standard exception it throws becomes a
  // usage error carrying its message.
  void custom(std::string name, std::string metavar, std::string help, Shown shown,
              std::function<void(const std::string&)> read) {
    add(std::move(name), std::move(metavar), std::move(help), shown.default_text.value_or(""),
        [read = std::move(read)](CommandLine& args) {
          const std::string text = args.value();
          try {
            read(text);
          } catch (const std::exception& e) {
            args.error(e.what());
          }
        });
  }

  // Reads argv into the fields; an unknown flag, a missing or bad value is a usage error and
  // --help shows usage() (both end the program: CommandLineExit).
  void parse(int argc, char** argv) {
    CommandLine args(program_, argc, argv, usage());
    while (args.next()) {
      const Entry* entry = find(args.flag());
      if (entry == nullptr) args.unknown();
      entry->read(args);
    }
  }

  // A usage error found after parsing (flags that contradict or need one another).
  [[noreturn]] void error(const std::string& message) const { usage_error(program_, message); }

  // The --help text: the usage line, the description, each flag with its help wrapped beside it
  // and its default in brackets, then the epilogue.
  std::string usage() const {
    std::string text = "usage: " + program_ + " [options]\n\n" + description_ + "\n\n";
    for (const Entry& entry : entries_) {
      if (!entry.heading.empty()) {
        text += entry.heading + "\n";
        continue;
      }
      const std::string help = entry.default_text.empty() ? entry.help : entry.help + " [" + entry.default_text + "]";
      text += described("  " + entry.name + (entry.metavar.empty() ? "" : " " + entry.metavar), help);
    }
    text += described("  --help", "show this help");
    if (!epilogue_.empty()) text += "\n" + epilogue_ + "\n";
    return text;
  }

 private:
  static constexpr size_t kHelpColumn = 26;  // where the help text starts
  static constexpr size_t kWidth = 100;      // and where it wraps

  struct Entry {
    std::string heading;  // a section's title; then the rest is empty
    std::string name, metavar, help, default_text;
    std::function<void(CommandLine&)> read;
  };

  void add(std::string name, std::string metavar, std::string help, std::string default_text,
           std::function<void(CommandLine&)> read) {
    if (name.rfind("--", 0) != 0 || name == "--help" || find(name) != nullptr) {
      throw std::logic_error("Flags: '" + name + "' is not a new flag name starting with --");
    }
    entries_.push_back({.heading = {}, .name = std::move(name), .metavar = std::move(metavar),
                        .help = std::move(help), .default_text = std::move(default_text), .read = std::move(read)});
  }

  const Entry* find(const std::string& name) const {
    for (const Entry& entry : entries_) {
      if (entry.heading.empty() && entry.name == name) return &entry;
    }
    return nullptr;
  }

  // The flag column, then the help's words wrapped at kWidth from kHelpColumn; a flag column too
  // wide for its help starts the help on the next line.
  static std::string described(const std::string& flag, const std::string& help) {
    std::string text = flag, line;
    if (flag.size() + 2 > kHelpColumn) text += "\n" + std::string(kHelpColumn, ' ');
    else text += std::string(kHelpColumn - flag.size(), ' ');
    std::istringstream words(help);
    std::string word;
    size_t column = kHelpColumn;
    bool first = true;
    while (words >> word) {
      if (!first && column + 1 + word.size() > kWidth) {
        text += "\n" + std::string(kHelpColumn, ' ');
        column = kHelpColumn;
        first = true;
      }
      if (!first) {
        text += ' ';
        ++column;
      }
      text += word;
      column += word.size();
      first = false;
    }
    return text + "\n";
  }

  template <class T>
  static T read_as(CommandLine& args) {
    if constexpr (std::is_same_v<T, std::string>) {
      return args.value();
    } else if constexpr (requires { typename T::value_type; }) {
      return read_as<typename T::value_type>(args);  // std::optional
    } else {
      return args.number<T>();
    }
  }

  // A field's value as the usage shows it: numbers in their shortest exact form (0.7, 0.0001, 1e-08).
  template <class T>
  static std::string printed(const T& field) {
    if constexpr (std::is_same_v<T, std::string>) {
      return field;
    } else if constexpr (requires { typename T::value_type; }) {
      return field ? printed(*field) : std::string();
    } else {
      char buffer[32];
      std::to_chars_result result;
      if constexpr (std::is_floating_point_v<T>) {
        result = std::to_chars(buffer, buffer + sizeof buffer, field, std::chars_format::general);
      } else {
        result = std::to_chars(buffer, buffer + sizeof buffer, field);
      }
      return std::string(buffer, result.ptr);
    }
  }

  std::string program_, description_, epilogue_;
  std::vector<Entry> entries_;
};

}  // namespace example
