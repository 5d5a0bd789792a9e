// build/tools/tessera-tokenize run as a user runs it: the token file it writes (llm.c's
// header, <|endoftext|> before each file, the files in the order given at any thread
// count), and its errors.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpt2_vocabulary.h"
#include "run_program.h"
#include "temp_dir.h"
#include "tessera/data/token_dataset.h"
#include "tessera/text/gpt2_tokenizer.h"
#include "test_support.h"

using tessera::testing::read_file_bytes;
using tessera::testing::TempDir;
using tessera::testing::write_file_bytes;
using test_support::contains;
using test_support::run_program;

namespace {

using tessera::detail::concat;

std::string program() { return test_support::program_from_env("TESSERA_TOKENIZE"); }
// The program with the test's vocabulary.
std::string tool() { return concat(program(), " --vocab ", text_test::gpt2_directory().string()); }

int32_t int32_at(const std::string& bytes, size_t offset) {
  int32_t value;
  std::memcpy(&value, bytes.data() + offset, 4);
  return value;
}

}  // namespace

TEST_CASE("tessera-tokenize writes <|endoftext|> and each file's tokens, in order, in llm.c's format") {
  TempDir dir;
  const std::vector<std::string> texts{"Hello world.\nSecond line, with 'quotes'.\n", "日本語のテキスト 👍\n", "",
                                       "caf\xE9 \xFF bytes"};
  std::string files;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string file = dir.file(concat("doc", i, ".txt"));
    write_file_bytes(file, texts[i]);
    files += concat(" ", file);
  }
  const auto run = run_program(concat(tool(), " -o ", dir.file("out.bin"), files));
  REQUIRE_MESSAGE(run.status == 0, run.err);

  const tessera::text::GPT2Tokenizer tokenizer(text_test::gpt2_directory());
  std::vector<int64_t> expected;
  for (const std::string& text : texts) {
    expected.push_back(50256);
    tokenizer.encode(text, expected);
  }
  CHECK(contains(run.out, std::to_string(expected.size()) + " tokens from 4 files"));
  const std::string bytes = read_file_bytes(dir.file("out.bin"));
  REQUIRE(bytes.size() == 1024 + 2 * expected.size());
  CHECK(int32_at(bytes, 0) == 20240520);
  CHECK(int32_at(bytes, 4) == 1);
  CHECK(int32_at(bytes, 8) == static_cast<int32_t>(expected.size()));
  for (size_t offset = 12; offset < 1024; offset += 4) CHECK(int32_at(bytes, offset) == 0);
  const tessera::data::TokenFile file(dir.file("out.bin"));
  const std::vector<uint16_t> tokens = file.read_all();
  CHECK(std::vector<int64_t>(tokens.begin(), tokens.end()) == expected);

  // One thread or several: the same bytes.
  const auto one_thread = run_program(concat(tool(), " --threads 1 -o ", dir.file("one.bin"), files));
  REQUIRE(one_thread.status == 0);
  CHECK(read_file_bytes(dir.file("one.bin")) == bytes);
}

TEST_CASE("tessera-tokenize names the file it cannot read and writes nothing") {
  TempDir dir;
  write_file_bytes(dir.file("a.txt"), "text");
  const auto missing =
      run_program(concat(tool(), " -o ", dir.file("out.bin"), " ", dir.file("a.txt"), " ", dir.file("nope.txt")));
  CHECK(missing.status == 1);
  CHECK(contains(missing.err, concat("'", dir.file("nope.txt"), "': cannot open it: No such file or directory")));
  CHECK(dir.entries() == std::vector<std::string>{"a.txt"});
  const auto directory = run_program(concat(tool(), " -o ", dir.file("out.bin"), " ", dir.path().string()));
  CHECK(directory.status == 1);
  CHECK(contains(directory.err, "is a directory"));
  const auto no_vocabulary = run_program(
      concat(program(), " --vocab ", dir.file("none"), " -o ", dir.file("out.bin"), " ", dir.file("a.txt")));
  CHECK(no_vocabulary.status == 1);
  CHECK(contains(no_vocabulary.err, "none/encoder.json': cannot open it (run scripts/get-gpt2-tokenizer)"));
}

TEST_CASE("tessera-tokenize --help, and usage errors exit 2") {
  const auto help = run_program(concat(program(), " --help"));
  CHECK(help.status == 0);
  CHECK(contains(help.out, "usage: tessera-tokenize [--vocab DIR] [--threads N] -o OUT.bin FILE..."));
  const auto no_output = run_program(concat(program(), " a.txt"));
  CHECK(no_output.status == 2);
  CHECK(contains(no_output.err, "no output file: give -o OUT.bin"));
  const auto bad_threads = run_program(concat(program(), " --threads 0 -o x a"));
  CHECK(bad_threads.status == 2);
  CHECK(contains(bad_threads.err, "--threads needs a positive integer, got '0'"));
}
