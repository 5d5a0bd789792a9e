// Where the GPT-2 tokenizer files are for the tests that need them: TESSERA_GPT2_DIR, or
// data/gpt2 in the source tree. gpt2_test_main.cpp fetches them there before any test runs.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace text_test {

inline std::filesystem::path gpt2_directory() {
  if (const char* dir = std::getenv("TESSERA_GPT2_DIR")) return dir;
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  return std::filesystem::path(source != nullptr ? source : ".") / "data" / "gpt2";
}

}  // namespace text_test
