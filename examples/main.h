// The examples' main(): bad input (a missing or corrupt file, a folder without images) ends
// the program with its message and a non-zero status instead of an uncaught exception;
// under mpirun the other ranks are then ended too.
//
//   int main(int argc, char** argv) { return example::main_reporting_errors("mnist", argc, argv, run); }
#pragma once

#include <cstdio>

#include "tessera/tensor/error.h"

namespace example {

// run(argc, argv)'s status, or 1 after printing "<program>: error: <message>" for a
// Tessera error.
inline int main_reporting_errors(const char* program, int argc, char** argv, int (*run)(int, char**)) {
  try {
    return run(argc, argv);
  } catch (const tessera::Error& error) {
    std::fprintf(stderr, "%s: error: %s\n", program, error.what());
    return 1;
  }
}

}  // namespace example
