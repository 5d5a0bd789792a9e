// The runner of the programs tests/doc_examples.py extracts from an API guide page: each
// runs in a fresh temporary directory (examples write files: model.safetensors, ...),
// which is removed after; an exception or a non-zero return fails it, with the page line.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>

namespace doc_examples {

inline int run(const char* where, const std::function<int()>& example) {
  const std::filesystem::path previous = std::filesystem::current_path();
  std::string pattern = (std::filesystem::temp_directory_path() / "tessera_doc_example.XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  std::filesystem::current_path(pattern);
  std::printf("--- %s\n", where);
  std::fflush(stdout);
  int status = 1;
  try {
    status = example();
    if (status != 0) std::printf("FAILED %s: returned %d\n", where, status);
  } catch (const std::exception& error) {
    std::printf("FAILED %s: %s\n", where, error.what());
  }
  std::fflush(stdout);
  std::filesystem::current_path(previous);
  std::filesystem::remove_all(pattern);
  return status == 0 ? 0 : 1;
}

}  // namespace doc_examples
