// examples/command_line.h: a flag declared once gives the parsing and the --help line, whose
// default is printed from the field's initial value; bad input is a usage error (status 2)
// naming the flag and the text, thrown rather than exiting, so it is tested in process.
#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../examples/command_line.h"

namespace {

struct Options {
  std::string data = "data/mnist";
  int64_t epochs = 14;
  double lr = 0.7;
  double eps = 1e-8;
  std::optional<int64_t> seq_len;
  std::string optimizer = "adadelta";
  bool dry_run = false;
};

void declare(example::Flags& flags, Options& o) {
  flags.value("--data", o.data, "DIR", "folder with the MNIST IDX files");
  flags.value("--epochs", o.epochs, "N", "epochs to train");
  flags.value("--lr", o.lr, "X", "learning rate");
  flags.value("--eps", o.eps, "X", "AdamW's eps");
  flags.value("--seq-len", o.seq_len, "T", "tokens per row", {.default_text = "the block size"});
  flags.choice("--optimizer", o.optimizer, {"adadelta", "sgd", "adam"}, "the optimizer");
  flags.toggle("--dry-run", o.dry_run, "one batch, then stop");
}

// argv for parse: the program's name, then the words.
struct Argv {
  explicit Argv(std::vector<std::string> words) : words_(std::move(words)) {
    words_.insert(words_.begin(), "prog");
    for (std::string& word : words_) pointers_.push_back(word.data());
  }
  int argc() const { return static_cast<int>(pointers_.size()); }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> words_;
  std::vector<char*> pointers_;
};

// What parsing these words throws (status -1: nothing).
example::CommandLineExit parse_exit(std::vector<std::string> words) {
  Options o;
  example::Flags flags("prog", "Does a thing.");
  declare(flags, o);
  Argv args(std::move(words));
  try {
    flags.parse(args.argc(), args.argv());
  } catch (const example::CommandLineExit& exit) {
    return exit;
  }
  return {-1, ""};
}

}  // namespace

TEST_CASE("the usage comes from the declarations, each default printed from its field") {
  Options o;
  example::Flags flags("prog", "Does a thing.", "After the flags.");
  declare(flags, o);
  CHECK(flags.usage() ==
        "usage: prog [options]\n"
        "\n"
        "Does a thing.\n"
        "\n"
        "  --data DIR              folder with the MNIST IDX files [data/mnist]\n"
        "  --epochs N              epochs to train [14]\n"
        "  --lr X                  learning rate [0.7]\n"
        "  --eps X                 AdamW's eps [1e-08]\n"
        "  --seq-len T             tokens per row [the block size]\n"
        "  --optimizer {adadelta,sgd,adam}\n"
        "                          the optimizer [adadelta]\n"
        "  --dry-run               one batch, then stop\n"
        "  --help                  show this help\n"
        "\n"
        "After the flags.\n");

  // Another initial value is another printed default: nothing is written twice.
  Options other;
  other.epochs = 3;
  other.lr = 1e-4;
  example::Flags changed("prog", "Does a thing.");
  declare(changed, other);
  CHECK(changed.usage().find("  --epochs N              epochs to train [3]\n") != std::string::npos);
  CHECK(changed.usage().find("  --lr X                  learning rate [0.0001]\n") != std::string::npos);
}

TEST_CASE("long help wraps at 100 columns under the help column") {
  bool on = false;
  example::Flags flags("prog", "");
  std::string help;
  for (int i = 0; i < 40; ++i) help += "word" + std::to_string(i) + " ";
  flags.toggle("--long", on, help);
  std::istringstream lines(flags.usage());
  std::string line;
  int help_lines = 0;
  std::string joined;
  while (std::getline(lines, line)) {
    CHECK(line.size() <= 100);
    if (line.rfind("  --long", 0) == 0 || (line.rfind(std::string(26, ' '), 0) == 0 && line.find("word") == 26)) {
      ++help_lines;
      joined += line.substr(26) + " ";
    }
  }
  CHECK(help_lines == 4);
  CHECK(joined == help);
}

TEST_CASE("parse sets the fields given and leaves the others at their defaults") {
  Options o;
  example::Flags flags("prog", "Does a thing.");
  declare(flags, o);
  Argv args({"--epochs", "2", "--seq-len", "64", "--optimizer", "sgd", "--dry-run", "--lr", "1e-3"});
  flags.parse(args.argc(), args.argv());
  CHECK(o.epochs == 2);
  CHECK(o.seq_len == std::optional<int64_t>(64));
  CHECK(o.optimizer == "sgd");
  CHECK(o.dry_run);
  CHECK(o.lr == 1e-3);
  CHECK(o.data == "data/mnist");
  CHECK(o.eps == 1e-8);
}

TEST_CASE("--help and bad input end parsing with the usage or an error naming the flag and the text") {
  const example::CommandLineExit help = parse_exit({"--epochs", "2", "--help"});
  CHECK(help.status == 0);
  Options o;
  example::Flags flags("prog", "Does a thing.");
  declare(flags, o);
  CHECK(help.text == flags.usage());

  struct Case {
    std::vector<std::string> words;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--frobnicate"}, "unknown option '--frobnicate'"},
           {{"--epochs"}, "--epochs needs a value"},
           {{"--epochs", "1e3"}, "--epochs expects an integer from 0 to 9223372036854775807, got '1e3'"},
           {{"--epochs", "-1"}, "--epochs expects an integer from 0 to 9223372036854775807, got '-1'"},
           {{"--lr", "nan"}, "--lr expects a finite number, got 'nan'"},
           {{"--optimizer", "lion"}, "--optimizer must be one of adadelta, sgd, adam, got 'lion'"},
       }) {
    const example::CommandLineExit exit = parse_exit(c.words);
    CHECK_MESSAGE(exit.status == 2, c.message);
    CHECK(exit.text == "prog: " + c.message + "\n(see prog --help)\n");
  }
}

TEST_CASE("a custom reader's exception is a usage error; a flag declared twice is refused") {
  int64_t size = 0;
  example::Flags flags("prog", "");
  flags.custom("--size", "SIZE", "a size", {}, [&size](const std::string& text) {
    if (text != "2KiB") throw std::invalid_argument("--size: '" + text + "' is not a size");
    size = 2048;
  });
  Argv good({"--size", "2KiB"});
  flags.parse(good.argc(), good.argv());
  CHECK(size == 2048);
  Argv bad({"--size", "lots"});
  try {
    flags.parse(bad.argc(), bad.argv());
    FAIL("no usage error");
  } catch (const example::CommandLineExit& exit) {
    CHECK(exit.status == 2);
    CHECK(exit.text == "prog: --size: 'lots' is not a size\n(see prog --help)\n");
  }
  CHECK_THROWS_AS(flags.custom("--size", "N", "again", {}, [](const std::string&) {}), std::logic_error);
  bool on = false;
  CHECK_THROWS_AS(flags.toggle("--help", on, "mine"), std::logic_error);
  CHECK_THROWS_AS(flags.toggle("size", on, "no dashes"), std::logic_error);
}
