// Helpers for the data tests: the shared temporary folder, IDX files built byte by byte (written
// here independently of the reader under test), gzip writing, and the torchvision
// reference table.
#pragma once

#include <zlib.h>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace data_test {

using TempDir = tessera::testing::TempDir;

using Bytes = std::vector<uint8_t>;

inline void append_big_endian(Bytes& out, uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

// Header: 0, 0, type code, ndim, then each size as a big-endian u32.
inline Bytes idx_header(uint8_t type_code, const std::vector<uint32_t>& sizes) {
  Bytes out{0, 0, type_code, static_cast<uint8_t>(sizes.size())};
  for (uint32_t size : sizes) append_big_endian(out, size, 4);
  return out;
}

// Elements as the file stores them: big-endian, `bytes` each, from their raw bit patterns.
template <class T>
Bytes big_endian_elements(const std::vector<T>& values) {
  Bytes out;
  for (T value : values) {
    if constexpr (sizeof(T) == 1) {
      out.push_back(static_cast<uint8_t>(value));
    } else if constexpr (sizeof(T) == 2) {
      append_big_endian(out, std::bit_cast<uint16_t>(value), 2);
    } else if constexpr (sizeof(T) == 4) {
      append_big_endian(out, std::bit_cast<uint32_t>(value), 4);
    } else {
      append_big_endian(out, std::bit_cast<uint64_t>(value), 8);
    }
  }
  return out;
}

inline Bytes concat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline void write_raw(const std::filesystem::path& file, const Bytes& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + file.string());
}

inline Bytes gzip_bytes(const Bytes& bytes) {
  z_stream stream{};
  // windowBits 15 + 16: a gzip wrapper rather than zlib's.
  if (deflateInit2(&stream, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::runtime_error("deflateInit2 failed");
  }
  Bytes out(deflateBound(&stream, bytes.size()) + 64);
  stream.next_in = const_cast<Bytef*>(bytes.data());
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  if (deflate(&stream, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate failed");
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

inline void write_gzip(const std::filesystem::path& file, const Bytes& bytes) { write_raw(file, gzip_bytes(bytes)); }

inline Bytes read_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline std::filesystem::path source_dir() {
  const char* dir = std::getenv("TESSERA_SOURCE_DIR");
  return dir != nullptr ? std::filesystem::path(dir) : std::filesystem::path(TESSERA_TEST_SOURCE_DIR);
}

struct ReferenceCase {
  int channels = 1;
  std::vector<double> mean, std;  // empty for the plain ToTensor case
  std::vector<uint32_t> bits;     // float32 bits, row-major [channels, 16, 16]
};

// tests/data/transforms_reference.txt, written by make_transforms_reference.py.
inline std::map<std::string, ReferenceCase> load_transforms_reference() {
  std::ifstream in(source_dir() / "tests/data/transforms_reference.txt");
  if (!in) throw std::runtime_error("cannot open tests/data/transforms_reference.txt");
  std::map<std::string, ReferenceCase> cases;
  ReferenceCase* current = nullptr;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    if (line.rfind("case ", 0) == 0) {
      std::string keyword, name, word;
      words >> keyword >> name;
      current = &cases[name];
      words >> word >> current->channels >> word;  // "channels" N "mean"
      std::vector<double>* target = &current->mean;
      while (words >> word) {
        if (word == "std") {
          target = &current->std;
        } else if (word != "-") {
          target->push_back(std::stod(word));
        }
      }
      continue;
    }
    std::string word;
    while (words >> word) current->bits.push_back(static_cast<uint32_t>(std::stoul(word, nullptr, 16)));
  }
  return cases;
}

}  // namespace data_test
