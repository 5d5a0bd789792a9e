// Running one of the project's programs (an example, a tool) as a user would: through the
// shell, with its standard output and error captured.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "temp_dir.h"

namespace test_support {

struct ProgramRun {
  int status = -1;  // the exit code, or 128 + the signal that ended the program
  std::string out, err;
};

// The program whose path the environment variable `variable` holds (meson test sets it).
inline std::string program_from_env(const char* variable) {
  const char* path = std::getenv(variable);
  REQUIRE_MESSAGE(path != nullptr, variable, " is not set (meson test sets it)");
  return path;
}

inline ProgramRun run_program(const std::string& command_line) {
  tessera::testing::TempDir logs;
  const std::string command = command_line + " > " + logs.file("out") + " 2> " + logs.file("err");
  const int raw = std::system(command.c_str());
  ProgramRun run;
  run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  run.out = tessera::testing::read_file_bytes(logs.file("out"));
  run.err = tessera::testing::read_file_bytes(logs.file("err"));
  return run;
}

}  // namespace test_support
