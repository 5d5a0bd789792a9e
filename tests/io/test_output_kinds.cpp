// What the shared writer (io::AtomicFile, behind io::save, data::write_token_file and every
// tool's output) and reader (io::open_regular_file, io::read_regular_file) do with paths
// that are not regular files, made in a temporary folder, never under /dev: a character
// device and a FIFO the user named are written through (a rename would replace the device
// with a file), other kinds refused naming the path and the kind; reads take regular files
// only and never wait on a FIFO.
#include <doctest/doctest.h>
#include <tessera/tessera.h>

#include <chrono>
#include <future>

#include "special_files.h"
#include "temp_dir.h"
#include "test_support.h"

namespace ts = tessera;
namespace io = tessera::io;
using test_support::contains;
using ts::testing::read_file_bytes;
using ts::testing::TempDir;
using ts::testing::write_file_bytes;

namespace {

std::string save_error(const std::string& path) {
  try {
    io::AtomicFile file(path);
    file.write("abc", 3);
    file.commit();
  } catch (const io::IOError& error) {
    return error.what();
  }
  return "";
}

// The message of a read of `path`, failing instead of hanging when it does not return in 10 s.
std::string read_error_within_seconds(const std::string& path) {
  auto result = std::async(std::launch::async, [path] {
    try {
      (void)io::read_regular_file(path);
    } catch (const io::IOError& error) {
      return std::string(error.what());
    }
    return std::string();
  });
  REQUIRE_MESSAGE(result.wait_for(std::chrono::seconds(10)) == std::future_status::ready, "the read hangs");
  return result.get();
}

}  // namespace

TEST_CASE("AtomicFile writes through to a character device the user named: it stays a device") {
  TempDir dir;
  const std::string null = dir.file("null");
  if (!test_support::make_null_device(null)) {
    MESSAGE("mknod is not allowed here (not root): skipped");
    return;
  }
  io::AtomicFile file(null);
  CHECK(file.writes_through());
  file.write("weights", 7);
  file.commit();
  CHECK(test_support::is_null_device(null));
  CHECK(dir.entries() == std::vector<std::string>{"null"});  // no temporary left beside it
  // io::save through it too, and an abandoned write leaves the device alone.
  ts::StateDict tensors;
  tensors.insert("w", ts::ones({4}));
  io::save(tensors, null);
  { io::AtomicFile abandoned(null); }
  CHECK(test_support::is_null_device(null));
  CHECK(dir.entries() == std::vector<std::string>{"null"});
}

TEST_CASE("AtomicFile writes through to a FIFO with a reader, and refuses one without") {
  TempDir dir;
  const std::string fifo = dir.file("pipe");
  REQUIRE(test_support::make_fifo(fifo));
  CHECK(contains(save_error(fifo), "cannot save to '" + fifo + "': it is a FIFO (named pipe) that no program reads"));
  ts::StateDict tensors;
  tensors.insert("w", ts::arange(0, 1000, 1, {.dtype = ts::DType::f32}));
  const std::string file = dir.file("model.safetensors");
  io::save(tensors, file);
  test_support::FifoReader reader(fifo);
  REQUIRE(reader.opened());
  io::save(tensors, fifo);
  CHECK(reader.bytes() == read_file_bytes(file));
  struct stat info {};
  REQUIRE(::lstat(fifo.c_str(), &info) == 0);
  CHECK(S_ISFIFO(info.st_mode));
}

TEST_CASE("AtomicFile refuses a directory, a block device and a socket, naming the path and its kind") {
  TempDir dir;
  const std::string folder = dir.file("folder");
  std::filesystem::create_directory(folder);
  write_file_bytes(folder + "/keep.txt", "mine");
  CHECK(contains(save_error(folder), "cannot save to '" + folder + "': it is a directory; a save writes a regular file"));
  CHECK(read_file_bytes(folder + "/keep.txt") == "mine");
  const std::string socket = dir.file("socket");
  REQUIRE(test_support::make_socket_file(socket));
  CHECK(contains(save_error(socket), "'" + socket + "': it is a socket"));
  const std::string block = dir.file("block");
  if (test_support::make_device(block, S_IFBLK, 7, 0)) {  // loop0's numbers: refused before it is opened
    CHECK(contains(save_error(block), "'" + block + "': it is a block device"));
  }
  // A regular file and a missing path are replaced atomically, as before; so is a program's own file.
  const std::string regular = dir.file("regular");
  write_file_bytes(regular, "old");
  CHECK(save_error(regular).empty());
  CHECK(read_file_bytes(regular) == "abc");
  {
    io::AtomicFile own(socket, io::AtomicFile::Mode::always_replace);
    own.write("x", 1);
    own.commit();
  }
  CHECK(read_file_bytes(socket) == "x");
}

TEST_CASE("reads take regular files only, refused before they are opened: a FIFO without a writer, a device") {
  TempDir dir;
  const std::string fifo = dir.file("pipe");
  REQUIRE(test_support::make_fifo(fifo));
  CHECK(contains(read_error_within_seconds(fifo), "cannot read '" + fifo + "': it is a FIFO (named pipe), not a regular file"));
  CHECK(contains(read_error_within_seconds(dir.path().string()), "it is a directory, not a regular file"));
  const std::string zero = dir.file("zero");
  if (test_support::make_device(zero, S_IFCHR, 1, 5)) {  // /dev/zero's numbers: would never end
    CHECK(contains(read_error_within_seconds(zero), "cannot read '" + zero + "': it is a character device"));
  }
  write_file_bytes(dir.file("small"), "0123456789");
  CHECK(io::read_regular_file(dir.file("small")) == "0123456789");
  try {
    (void)io::read_regular_file(dir.file("small"), 4, "a test file");
    FAIL("not refused");
  } catch (const io::FormatError& error) {
    CHECK(contains(error.what(), dir.file("small") + ": byte 0: the file is 10 bytes, over the 4-byte limit for a test file"));
  }
}
