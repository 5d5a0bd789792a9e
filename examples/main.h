// The examples' main(): bad input (a missing or corrupt file, a folder without images) ends
// the program with its message and a non-zero status instead of an uncaught exception (and
// abort); under mpirun the other ranks are then ended too. Errors from outside Tessera
// (std::filesystem's, an allocation that failed) end it the same way.
//
//   int main(int argc, char** argv) { return example::main_reporting_errors("mnist", argc, argv, run); }
#pragma once

#include <cstdio>
#include <exception>
#include <new>

namespace example {

// run(argc, argv)'s status, or 1 after printing "<program>: error: <message>" for an
// exception.
inline int main_reporting_errors(const char* program, int argc, char** argv, int (*run)(int, char**)) {
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of memory (an allocation failed)\n", program);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: error: %s\n", program, error.what());
  }
  return 1;
}

}  // namespace example
