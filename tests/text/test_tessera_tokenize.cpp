// build/tools/tessera-tokenize run as a user runs it: the token file it writes (llm.c's
// header, <|endoftext|> before each file, the files in the order given at any thread
// count), its errors, the outputs it writes through (a character device, a FIFO) or refuses,
// the inputs it refuses before opening (a FIFO, a device), and its memory on one long word.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gpt2_vocabulary.h"
#include "run_program.h"
#include "special_files.h"
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
  CHECK(contains(missing.err, concat("cannot open '", dir.file("nope.txt"), "': No such file or directory")));
  CHECK(dir.entries() == std::vector<std::string>{"a.txt"});
  const auto directory = run_program(concat(tool(), " -o ", dir.file("out.bin"), " ", dir.path().string()));
  CHECK(directory.status == 1);
  CHECK(contains(directory.err, "is a directory"));
  const auto no_vocabulary = run_program(
      concat(program(), " --vocab ", dir.file("none"), " -o ", dir.file("out.bin"), " ", dir.file("a.txt")));
  CHECK(no_vocabulary.status == 1);
  CHECK(contains(no_vocabulary.err, "GPT-2 tokenizer: cannot open '" + dir.file("none/encoder.json") +
                                        "': No such file or directory (scripts/get-gpt2-tokenizer fetches the files)"));
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

namespace {

// The peak memory the tool reports for its run (its VmHWM: this process's memory, which a
// fork shares until the exec, is not counted).
double reported_peak_mib(const test_support::ProgramRun& run) {
  const size_t at = run.out.find("peak memory ");
  REQUIRE_MESSAGE(at != std::string::npos, run.out, run.err);
  return std::stod(run.out.substr(at + 12));
}

// `bytes` lowercase letters, one word without a break: a single piece for byte-pair merging.
std::string one_word(size_t bytes) {
  std::string word(bytes, 'a');
  uint64_t state = 88172645463325252ull;
  for (char& c : word) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;  // xorshift64
    c = static_cast<char>('a' + state % 26);
  }
  return word;
}

}  // namespace

TEST_CASE("tessera-tokenize -o writes through to a character device or a FIFO, and refuses a folder") {
  TempDir dir;
  write_file_bytes(dir.file("a.txt"), "Hello world.\n");
  const auto reference = run_program(concat(tool(), " -o ", dir.file("reference.bin"), " ", dir.file("a.txt")));
  REQUIRE(reference.status == 0);
  if (test_support::make_null_device(dir.file("null"))) {
    const auto to_null = run_program(concat(tool(), " -o ", dir.file("null"), " ", dir.file("a.txt")));
    CHECK_MESSAGE(to_null.status == 0, to_null.err);
    CHECK(test_support::is_null_device(dir.file("null")));
  }
  REQUIRE(test_support::make_fifo(dir.file("pipe")));
  {
    test_support::FifoReader reader(dir.file("pipe"));
    REQUIRE(reader.opened());
    const auto to_pipe = run_program(concat(tool(), " -o ", dir.file("pipe"), " ", dir.file("a.txt")));
    CHECK_MESSAGE(to_pipe.status == 0, to_pipe.err);
    CHECK(reader.bytes() == read_file_bytes(dir.file("reference.bin")));
  }
  const auto no_reader = run_program(concat(tool(), " -o ", dir.file("pipe"), " ", dir.file("a.txt")));
  CHECK(no_reader.status == 1);
  CHECK(contains(no_reader.err, "it is a FIFO (named pipe) that no program reads"));
  std::filesystem::create_directory(dir.file("folder"));
  write_file_bytes(dir.file("folder/keep.txt"), "mine");
  const auto to_folder = run_program(concat(tool(), " -o ", dir.file("folder"), " ", dir.file("a.txt")));
  CHECK(to_folder.status == 1);
  CHECK(contains(to_folder.err, "tessera-tokenize: error: cannot save to '" + dir.file("folder") + "': it is a directory"));
  CHECK(read_file_bytes(dir.file("folder/keep.txt")) == "mine");
}

TEST_CASE("tessera-tokenize refuses inputs that are not regular files before opening them: a FIFO, /dev/zero") {
  TempDir dir;
  REQUIRE(test_support::make_fifo(dir.file("pipe")));  // no writer: reading it would wait forever
  // timeout: a regression fails the test in seconds instead of hanging the suite.
  const auto fifo = run_program(concat("timeout 30 ", tool(), " -o ", dir.file("out.bin"), " ", dir.file("pipe")));
  CHECK(fifo.status == 1);
  CHECK(contains(fifo.err, "cannot read '" + dir.file("pipe") + "': it is a FIFO (named pipe), not a regular file"));
  if (test_support::make_device(dir.file("zero"), S_IFCHR, 1, 5)) {  // /dev/zero's numbers: it never ends
    const auto zero = run_program(concat("timeout 30 ", tool(), " -o ", dir.file("out.bin"), " ", dir.file("zero")));
    CHECK(zero.status == 1);
    CHECK(contains(zero.err, "cannot read '" + dir.file("zero") + "': it is a character device, not a regular file"));
  }
  CHECK_FALSE(std::filesystem::exists(dir.file("out.bin")));
}

TEST_CASE("tessera-tokenize on one 4 MiB word: memory bounded by 20 bytes per byte, every byte kept") {
  TempDir dir;
  const size_t bytes = 4 << 20;
  const std::string word = one_word(bytes);
  write_file_bytes(dir.file("word.txt"), word);
  write_file_bytes(dir.file("tiny.txt"), "tiny");
  // Without glibc's MALLOC_PERTURB_ (which meson test sets): it fills every allocation, so
  // memory reserved but never used would count as resident.
  const std::string measured = concat("env -u MALLOC_PERTURB_ ", tool(), " -o ");
  const auto tiny = run_program(concat(measured, dir.file("tiny.bin"), " ", dir.file("tiny.txt")));
  REQUIRE(tiny.status == 0);
  const auto run = run_program(concat(measured, dir.file("word.bin"), " ", dir.file("word.txt")));
  REQUIRE_MESSAGE(run.status == 0, run.err);
  const double baseline = reported_peak_mib(tiny), peak = reported_peak_mib(run);
  const double per_byte = (peak - baseline) / (static_cast<double>(bytes) / (1 << 20));
  MESSAGE("peak ", peak, " MiB, ", baseline, " MiB with a 4-byte file: ", per_byte, " bytes per byte of the word");
  CHECK(per_byte < 20);  // the text, its byte tokens, the merge heap, the tokens written (about 30 before)
  const tessera::text::GPT2Tokenizer tokenizer(text_test::gpt2_directory());
  const tessera::data::TokenFile file(dir.file("word.bin"));
  CHECK(tokenizer.decode(std::vector<int64_t>(file.tokens().begin() + 1, file.tokens().end())) == word);
}

TEST_CASE("tessera-tokenize out of memory ends with a message naming the file, never an abort") {
  // An address-space limit a little above this process's (which maps the same libraries
  // and the same vocabulary): enough for a small file, far too little for a 32 MiB word.
  int64_t vm_kib = 0;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmSize:", 0) == 0) vm_kib = std::stoll(line.substr(7));
  }
  REQUIRE(vm_kib > 0);
  const std::string limited = concat("ulimit -v ", vm_kib + 200 * 1024, "; ", tool(), " --threads 1 -o ");
  TempDir dir;
  write_file_bytes(dir.file("tiny.txt"), "tiny");
  const auto tiny = run_program(concat(limited, dir.file("tiny.bin"), " ", dir.file("tiny.txt")));
  if (tiny.status != 0) {
    MESSAGE("the tool needs more address space than this test gives it: skipped (", tiny.err, ")");
    return;
  }
  write_file_bytes(dir.file("word.txt"), one_word(32 << 20));
  const auto word = run_program(concat(limited, dir.file("word.bin"), " ", dir.file("word.txt")));
  CHECK(word.status == 1);  // not 134 (SIGABRT from an uncaught std::bad_alloc)
  CHECK(contains(word.err, "tessera-tokenize: error: '" + dir.file("word.txt") +
                               "': out of memory while encoding its 33554432 bytes"));
  CHECK_FALSE(std::filesystem::exists(dir.file("word.bin")));
}
