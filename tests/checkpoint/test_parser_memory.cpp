// What the parsers take before refusing a hostile file: memory bounded by the file, never
// by what the file claims. Each case runs in a forked child, which reports how far its
// peak resident memory (VmHWM) rose. (Not in the sanitizer suite: ASan's shadow memory
// would blur the figures.)
#include "checkpoint_test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

using namespace checkpoint_test;
using ts::testing::TempDir;
using ts::testing::write_file_bytes;

namespace {

int64_t peak_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

struct Measured {
  std::string error;      // what the action threw
  double peak_rise_mib = -1;
};

// Runs `action` in a child process; its error message and how much its peak memory rose.
Measured measure(const std::function<void()>& action) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    // The child inherits the parent's peak: reset it to the current resident size (Linux 4.0+).
    std::ofstream("/proc/self/clear_refs") << "5";
    const int64_t before = peak_kib();
    std::string error = error_of(action);
    const std::string report = std::to_string(peak_kib() - before) + "\n" + error;
    (void)::write(pipe_fds[1], report.data(), report.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string report;
  char buffer[4096];
  for (ssize_t got; (got = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) report.append(buffer, static_cast<size_t>(got));
  ::close(pipe_fds[0]);
  ::waitpid(child, nullptr, 0);
  Measured measured;
  const size_t newline = report.find('\n');
  REQUIRE(newline != std::string::npos);
  measured.peak_rise_mib = std::stod(report.substr(0, newline)) / 1024.0;
  measured.error = report.substr(newline + 1);
  MESSAGE("peak memory rose ", measured.peak_rise_mib, " MiB: ", measured.error.substr(0, 160));
  return measured;
}

// An IDX header: two zero bytes, the type, the number of dimensions, big-endian sizes.
std::string idx_header(uint8_t type, const std::vector<uint32_t>& sizes) {
  std::string bytes{'\0', '\0', static_cast<char>(type), static_cast<char>(sizes.size())};
  for (uint32_t size : sizes) {
    for (int shift : {24, 16, 8, 0}) bytes += static_cast<char>((size >> shift) & 0xFF);
  }
  return bytes;
}

// "[0,0,0,...]": 2 bytes of text per value, the most values a JSON text can hold.
std::string zeros_array(size_t bytes) {
  std::string text = "[";
  while (text.size() + 2 < bytes) text += "0,";
  return text + "0]";
}

}  // namespace

TEST_CASE("JSON in metadata.json and safetensors headers takes at most 32 times its size before it is refused") {
  TempDir dir;
  const size_t bytes = 8 << 20;  // unchecked, its 4 million values would take up to 576 MiB
  write_file_bytes(dir.file("metadata.json"), zeros_array(bytes));
  Measured metadata = measure([&] { ckpt::ShardedCheckpoint checkpoint(dir.path().string()); });
  CHECK(contains(metadata.error, "/metadata.json: byte "));
  CHECK(contains(metadata.error, "its values need more than 2694840"));  // 32 x 8 MiB + 1 MiB
  CHECK(contains(metadata.error, " bytes of memory, the limit for this document"));
  CHECK(metadata.peak_rise_mib < 8 + 32 * 8 + 1 + 16);  // the text, the values allowed, and slack

  std::string header = "{\"x\":" + zeros_array(bytes) + "}";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string file(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(file.data(), &length, 8);
  write_file_bytes(dir.file("hostile.safetensors"), file + header);
  Measured safetensors = measure([&] { ts::io::load(dir.file("hostile.safetensors")); });
  CHECK(contains(safetensors.error, "hostile.safetensors: byte "));
  CHECK(contains(safetensors.error, "bytes of memory, the limit for this document"));
  CHECK(safetensors.peak_rise_mib < 8 + 32 * 8 + 1 + 16);
}

TEST_CASE("MNIST refuses images and labels whose headers disagree before reading either") {
  TempDir dir;
  // A million images (784 MB, sparse) beside 5 labels: refused from the headers alone.
  write_file_bytes(dir.file("train-images-idx3-ubyte"), idx_header(0x08, {1000000, 28, 28}));
  REQUIRE(::truncate(dir.file("train-images-idx3-ubyte").c_str(), 16 + int64_t{1000000} * 784) == 0);
  write_file_bytes(dir.file("train-labels-idx1-ubyte"), idx_header(0x08, {5}) + std::string(5, '\1'));
  Measured mnist = measure([&] { ts::data::MNIST(dir.path(), ts::data::Split::train); });
  CHECK(contains(mnist.error, "has 5 labels but MNIST train images file '"));
  CHECK(contains(mnist.error, "has 1000000 images"));
  CHECK(mnist.peak_rise_mib < 16);
}

TEST_CASE("real headers fit the JSON budget: 20,000 small tensors with long names") {
  TempDir dir;
  ts::StateDict many;
  for (int i = 0; i < 20000; ++i) {
    many.insert("transformer.h." + std::to_string(i / 12) + ".mlp.c_fc.weight_" + std::to_string(i), ts::full({2, 1}, i));
  }
  ts::io::save(many, dir.file("many.safetensors"));
  ts::io::SafetensorsFile file(dir.file("many.safetensors"));
  CHECK(file.entries().size() == 20000);
  CHECK(file.data_offset() > (size_t{1} << 20));  // over the budget's 1 MiB floor: the 32x bound decides
  CHECK(file.read("transformer.h.1666.mlp.c_fc.weight_19999").to_vector<float>() == std::vector<float>{19999, 19999});
}
