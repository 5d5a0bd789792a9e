// tessera-tokenize: text files -> one llm.c token file (data/token_file.h) of GPT-2 tokens.
// Each file is encoded on its own, as a document, and preceded by <|endoftext|> (50256), as
// llm.c's and nanoGPT's data scripts do; the documents follow one another in the order
// given, whatever order the threads finish them in, so the output is the same at any
// thread count.
//
//   tessera-tokenize -o data/brown/train.bin data/brown/text/*.txt
//   tessera-tokenize --vocab data/gpt2 --threads 4 -o out.bin a.txt b.txt
#include <tessera/tessera.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace ts = tessera;

namespace {

const char* kUsage = R"(usage: tessera-tokenize [--vocab DIR] [--threads N] -o OUT.bin FILE...

Encodes each FILE with GPT-2's tokenizer (byte-level BPE), puts <|endoftext|> (50256)
before each, and writes all of them, in the order given, to OUT.bin in llm.c's token format:
a header of 256 int32 (magic 20240520, version 1, token count), then the tokens as uint16.

options:
  -o, --output OUT.bin   the token file to write (replaced atomically; a character
                         device or a FIFO is written through, other kinds refused)
  --vocab DIR            DIR/encoder.json and DIR/vocab.bpe (default: data/gpt2;
                         scripts/get-gpt2-tokenizer fetches them)
  --threads N            files encoded at once (default: the machine's hardware threads)
  -h, --help             show this help

FILE must be a regular file: a FIFO or a device is refused before it is opened (reading
one could wait for a writer forever, or never end). Memory: about 4 bytes per byte of the
largest file, plus up to 16 per byte of its longest piece (a run of letters, digits or
punctuation without a space).

Text is read as bytes: UTF-8 is encoded as GPT-2 encodes it, and any byte that is not UTF-8
becomes a byte token of its own, so decoding gives the file back exactly.
Prints the number of tokens written, the time and the peak memory. Exit status: 0 on
success, 1 when a file cannot be read or written (the message names it), 2 on a usage error.
)";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "tessera-tokenize: %s\n(see tessera-tokenize --help)\n", message.c_str());
  std::exit(2);
}

struct Arguments {
  std::string vocab = "data/gpt2";
  std::string output;
  int threads = 0;
  std::vector<std::string> inputs;
};

Arguments parse(int argc, char** argv) {
  Arguments arguments;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    auto value = [&](const std::string& flag) -> std::string {
      if (i + 1 >= argc) usage_error(flag + " needs a value");
      return argv[++i];
    };
    if (argument == "-h" || argument == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (argument == "-o" || argument == "--output") {
      arguments.output = value(argument);
    } else if (argument == "--vocab") {
      arguments.vocab = value(argument);
    } else if (argument == "--threads") {
      const std::string text = value(argument);
      try {
        size_t used = 0;
        arguments.threads = std::stoi(text, &used);
        if (used != text.size() || arguments.threads < 1) throw std::invalid_argument(text);
      } catch (const std::exception&) {
        usage_error("--threads needs a positive integer, got '" + text + "'");
      }
    } else if (argument.size() > 1 && argument[0] == '-') {
      usage_error("unknown option '" + argument + "'");
    } else {
      arguments.inputs.push_back(argument);
    }
  }
  if (arguments.output.empty()) usage_error("no output file: give -o OUT.bin");
  if (arguments.inputs.empty()) usage_error("no input files");
  return arguments;
}

// This process's peak resident memory (VmHWM), in KiB; 0 where /proc cannot tell.
int64_t peak_resident_kib() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return 0;
  char line[256];
  long long kib = 0;
  while (std::fgets(line, sizeof line, status) != nullptr) {
    if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) break;
  }
  std::fclose(status);
  return kib;
}

// <|endoftext|> and the tokens of one file, as uint16 (the vocabulary was checked to fit).
// Only a regular file is read (a FIFO or a device is refused before it is opened: reading
// one would wait for a writer, or never end, as /dev/zero does).
std::vector<uint16_t> tokenize_file(const ts::text::GPT2Tokenizer& tokenizer, const std::string& path) {
  size_t bytes = 0;
  try {
    std::vector<int64_t> tokens{tokenizer.eot_token()};
    {
      const std::string text = ts::io::read_regular_file(path);
      bytes = text.size();
      tokenizer.encode(text, tokens);
    }  // the text is freed before the tokens are copied
    return std::vector<uint16_t>(tokens.begin(), tokens.end());
  } catch (const std::bad_alloc&) {
    const std::string doing = bytes == 0 ? "reading it" : "encoding its " + std::to_string(bytes) + " bytes";
    throw ts::Error("'" + path + "': out of memory while " + doing +
                    " (encoding takes about 4 bytes of memory per byte of text, plus up to 16 per byte of its "
                    "longest piece: a run of letters, digits or punctuation with no space)");
  }
}

int run(const Arguments& arguments) {
  const auto start = std::chrono::steady_clock::now();
  const ts::text::GPT2Tokenizer tokenizer(arguments.vocab);
  if (tokenizer.vocab_size() > 65536) {
    throw ts::ValueError("the vocabulary in '" + arguments.vocab + "' has " + std::to_string(tokenizer.vocab_size()) +
                         " tokens: more than the token format's uint16 can hold");
  }

  // The threads take files one at a time; results land by input position, so the output
  // does not depend on which thread finishes first.
  const size_t files = arguments.inputs.size();
  std::vector<std::vector<uint16_t>> encoded(files);
  std::vector<std::exception_ptr> errors(files);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < files; i = next++) {
      try {
        encoded[i] = tokenize_file(tokenizer, arguments.inputs[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const size_t threads = std::min<size_t>(
      files, arguments.threads > 0 ? arguments.threads : std::max(1u, std::thread::hardware_concurrency()));
  {
    std::vector<std::jthread> pool;
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
  }
  // The first failing file in input order, whichever thread met it first.
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }

  size_t total = 0;
  for (const auto& tokens : encoded) total += tokens.size();
  std::vector<uint16_t> all;
  all.reserve(total);
  for (auto& tokens : encoded) {
    all.insert(all.end(), tokens.begin(), tokens.end());
    std::vector<uint16_t>().swap(tokens);
  }
  ts::data::write_token_file(arguments.output, all);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %zu tokens from %zu files in %.2f s, peak memory %.1f MiB\n", arguments.output.c_str(), all.size(),
              files, seconds, static_cast<double>(peak_resident_kib()) / 1024.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Arguments arguments = parse(argc, argv);
  try {
    return run(arguments);
  } catch (const ts::Error& error) {
    std::fprintf(stderr, "tessera-tokenize: error: %s\n", error.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "tessera-tokenize: error: out of memory\n");
  } catch (const std::exception& error) {  // never an abort without a word
    std::fprintf(stderr, "tessera-tokenize: error: %s\n", error.what());
  }
  return 1;
}
