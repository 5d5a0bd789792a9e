// What the tests of the example programs share: the program under test, named by an
// environment variable that meson test sets (GPT2_EXAMPLE, MNIST_EXAMPLE, ...), run with
// arguments; the data helpers (a fake MNIST among them); the events of its --json output;
// and a checkpoint folder's "latest" pointed back at an earlier step, as a run stopped there
// would have left it.
#pragma once

#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <vector>
#include <tessera/tessera.h>

#include "../data/data_test_support.h"
#include "run_program.h"
#include "test_support.h"

namespace ts = tessera;
namespace json = tessera::io::json;
using data_test::Bytes;
using data_test::TempDir;
using test_support::contains;
using Run = test_support::ProgramRun;

namespace example_test {

// The program `variable` names, run with `arguments` (a shell command line's rest).
inline Run run_program_of(const char* variable, const std::string& arguments) {
  return test_support::run_program(test_support::program_from_env(variable) + " " + arguments);
}

// The JSON lines of a `--json` run's output (every line is one object) whose "event" is
// `kind`, in order.
inline std::vector<json::Value> events(const std::string& out, const std::string& kind) {
  std::vector<json::Value> found;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    json::Value event = json::parse(line);
    if (event.at("event").as_string() == kind) found.push_back(event);
  }
  return found;
}

// A fake MNIST split in MNIST's layout (`prefix`: "train" or "t10k"): `samples` images whose
// pixels encode their label (a bright band of rows), so a network can learn it.
inline void write_fake_mnist_split(const std::filesystem::path& root, const std::string& prefix, uint32_t samples) {
  Bytes images = data_test::idx_header(0x08, {samples, 28, 28});
  Bytes labels = data_test::idx_header(0x08, {samples});
  for (uint32_t i = 0; i < samples; ++i) {
    uint8_t label = static_cast<uint8_t>(i % 10);
    labels.push_back(label);
    for (int p = 0; p < 784; ++p) images.push_back(static_cast<uint8_t>((p / 78 == label) ? 255 : (i * 13 + p) % 40));
  }
  data_test::write_raw(root / (prefix + "-images-idx3-ubyte"), images);
  data_test::write_raw(root / (prefix + "-labels-idx1-ubyte"), labels);
}

// Makes `checkpoints`/latest name `step_folder` ("step-00000004").
inline void point_latest_at(const std::string& checkpoints, const std::string& step_folder) {
  ts::io::AtomicFile pointer(checkpoints + "/latest");
  const std::string line = step_folder + "\n";
  pointer.write(line.data(), line.size());
  pointer.commit();
}

}  // namespace example_test
