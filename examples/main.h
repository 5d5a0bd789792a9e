// The examples' main(): bad input (a missing or corrupt file, a folder without images) ends
// the program with its message and a non-zero status instead of an uncaught exception (and
// abort); under mpirun the other ranks are then ended too. Errors from outside Tessera
// (std::filesystem's, an allocation that failed) end it the same way. --help and usage errors
// (CommandLineExit, command_line.h) print their text and end with their status (0 and 2).
//
//   int main(int argc, char** argv) { return example::main_reporting_errors("mnist", argc, argv, run); }
#pragma once

#include <cstdio>
#include <exception>
#include <new>

#include "command_line.h"

namespace example {

// run(argc, argv)'s status; the command line's (0 after --help, 2 after a usage error); or 1
// after printing "<program>: error: <message>" for an exception.
inline int main_reporting_errors(const char* program, int argc, char** argv, int (*run)(int, char**)) {
  try {
    return run(argc, argv);
  } catch (const CommandLineExit& exit) {
    std::fputs(exit.text.c_str(), exit.status == 0 ? stdout : stderr);
    return exit.status;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of memory (an allocation failed)\n", program);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: error: %s\n", program, error.what());
  }
  return 1;
}

}  // namespace example
