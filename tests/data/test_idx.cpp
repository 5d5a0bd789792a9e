// IDX reader: round trips for every type code, raw and gzip; every malformed header field;
// truncation at every header offset and at data offsets; overlong files; lying sizes that
// must fail before anything of their size is allocated.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <tessera/tessera.h>

#include "data_test_support.h"
#include "test_support.h"

namespace ts = tessera;
using data_test::Bytes;
using data_test::TempDir;
using ts::DType;
using ts::Shape;

using test_support::contains;
using test_support::error_of;

namespace {

// The message of the DataError `read` throws ("" when it throws none).
// Writes `bytes` raw and gzip-compressed and runs `check(file, gzip)` on each.
void for_raw_and_gzip(const TempDir& dir, const std::string& name, const Bytes& bytes,
                      const std::function<void(const std::filesystem::path&, bool)>& check) {
  data_test::write_raw(dir / name, bytes);
  data_test::write_gzip(dir / (name + ".gz"), bytes);
  for (bool gzip : {false, true}) {
    CAPTURE(gzip);
    check(gzip ? dir / (name + ".gz") : dir / name, gzip);
  }
}

std::string offset_text(uint64_t offset, bool gzip) {
  return ts::detail::concat(gzip ? "decompressed byte offset " : "byte offset ", offset, ":");
}

template <class T>
std::vector<uint64_t> bit_patterns(const std::vector<T>& values) {
  std::vector<uint64_t> bits;
  for (T v : values) {
    if constexpr (sizeof(T) == 4) {
      bits.push_back(std::bit_cast<uint32_t>(v));
    } else {
      bits.push_back(std::bit_cast<uint64_t>(v));
    }
  }
  return bits;
}

}  // namespace

TEST_CASE("IDX round trip of uint8, raw and gzip") {
  TempDir dir;
  std::vector<uint8_t> values(3 * 4 * 5);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint8_t>(i * 37 + 250);
  Bytes bytes = data_test::concat(data_test::idx_header(0x08, {3, 4, 5}), data_test::big_endian_elements(values));
  for_raw_and_gzip(dir, "u8.idx", bytes, [&](const std::filesystem::path& file, bool) {
    ts::Tensor t = ts::data::read_idx(file);
    CHECK(t.dtype() == DType::u8);
    CHECK(t.sizes() == Shape{3, 4, 5});
    CHECK(t.to_vector<uint8_t>() == values);
  });
}

TEST_CASE("IDX round trip of the signed integer codes into int64") {
  TempDir dir;
  SUBCASE("0x09 int8") {
    std::vector<int8_t> values;
    for (int v = -128; v <= 127; ++v) values.push_back(static_cast<int8_t>(v));
    Bytes bytes = data_test::concat(data_test::idx_header(0x09, {16, 16}), data_test::big_endian_elements(values));
    for_raw_and_gzip(dir, "i8.idx", bytes, [&](const std::filesystem::path& file, bool) {
      ts::Tensor t = ts::data::read_idx(file);
      CHECK(t.dtype() == DType::i64);
      CHECK(t.sizes() == Shape{16, 16});
      std::vector<int64_t> got = t.to_vector<int64_t>();
      for (size_t i = 0; i < values.size(); ++i) CHECK(got[i] == values[i]);
    });
  }
  SUBCASE("0x0B int16") {
    std::vector<int16_t> values{-32768, -32767, -256, -255, -1, 0, 1, 255, 256, 12345, 32767, 0x0102};
    Bytes bytes = data_test::concat(data_test::idx_header(0x0B, {12}), data_test::big_endian_elements(values));
    for_raw_and_gzip(dir, "i16.idx", bytes, [&](const std::filesystem::path& file, bool) {
      ts::Tensor t = ts::data::read_idx(file);
      CHECK(t.dtype() == DType::i64);
      CHECK(t.sizes() == Shape{12});
      std::vector<int64_t> got = t.to_vector<int64_t>();
      for (size_t i = 0; i < values.size(); ++i) CHECK(got[i] == values[i]);
    });
  }
  SUBCASE("0x0C int32") {
    std::vector<int32_t> values{std::numeric_limits<int32_t>::min(), -16777216, -65536, -1, 0, 1, 0x01020304,
                                std::numeric_limits<int32_t>::max()};
    Bytes bytes = data_test::concat(data_test::idx_header(0x0C, {2, 2, 2}), data_test::big_endian_elements(values));
    for_raw_and_gzip(dir, "i32.idx", bytes, [&](const std::filesystem::path& file, bool) {
      ts::Tensor t = ts::data::read_idx(file);
      CHECK(t.dtype() == DType::i64);
      CHECK(t.sizes() == Shape{2, 2, 2});
      std::vector<int64_t> got = t.to_vector<int64_t>();
      for (size_t i = 0; i < values.size(); ++i) CHECK(got[i] == values[i]);
    });
  }
}

TEST_CASE("IDX round trip of the float codes, bit for bit") {
  TempDir dir;
  SUBCASE("0x0D float32") {
    std::vector<float> values{0.0f, -0.0f, 1.5f, -3.25e-7f, std::numeric_limits<float>::denorm_min(),
                              std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(), 0.1f, 16777217.0f};
    Bytes bytes = data_test::concat(data_test::idx_header(0x0D, {1, 10}), data_test::big_endian_elements(values));
    for_raw_and_gzip(dir, "f32.idx", bytes, [&](const std::filesystem::path& file, bool) {
      ts::Tensor t = ts::data::read_idx(file);
      CHECK(t.dtype() == DType::f32);
      CHECK(t.sizes() == Shape{1, 10});
      CHECK(bit_patterns(t.to_vector<float>()) == bit_patterns(values));
    });
  }
  SUBCASE("0x0E float64") {
    std::vector<double> values{0.0, -0.0, 0.1, -1e300, std::numeric_limits<double>::denorm_min(),
                               std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(),
                               3.141592653589793};
    // Eight dimensions, the most accepted.
    Bytes bytes = data_test::concat(data_test::idx_header(0x0E, {1, 2, 1, 2, 1, 2, 1, 1}),
                                    data_test::big_endian_elements(values));
    for_raw_and_gzip(dir, "f64.idx", bytes, [&](const std::filesystem::path& file, bool) {
      ts::Tensor t = ts::data::read_idx(file);
      CHECK(t.dtype() == DType::f64);
      CHECK(t.sizes() == Shape{1, 2, 1, 2, 1, 2, 1, 1});
      CHECK(bit_patterns(t.to_vector<double>()) == bit_patterns(values));
    });
  }
}

TEST_CASE("IDX gzip is recognised by its magic bytes, not by the file name") {
  TempDir dir;
  Bytes bytes = data_test::concat(data_test::idx_header(0x08, {4}), Bytes{9, 8, 7, 6});
  data_test::write_raw(dir / "raw-but-named.gz", bytes);
  data_test::write_gzip(dir / "gzip-but-named.idx", bytes);
  CHECK(ts::data::read_idx(dir / "raw-but-named.gz").to_vector<uint8_t>() == std::vector<uint8_t>{9, 8, 7, 6});
  CHECK(ts::data::read_idx(dir / "gzip-but-named.idx").to_vector<uint8_t>() == std::vector<uint8_t>{9, 8, 7, 6});
}

TEST_CASE("IDX with a zero-sized dimension holds no data") {
  TempDir dir;
  for_raw_and_gzip(dir, "empty.idx", data_test::idx_header(0x08, {0, 28, 28}),
                   [&](const std::filesystem::path& file, bool) {
                     ts::Tensor t = ts::data::read_idx(file);
                     CHECK(t.sizes() == Shape{0, 28, 28});
                     CHECK(t.numel() == 0);
                   });
}

TEST_CASE("IDX truncated at every header offset and at data offsets") {
  TempDir dir;
  std::vector<uint8_t> values(2 * 3 * 4);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint8_t>(i + 1);
  // 16 header bytes (4 + 3 sizes), then 24 data bytes.
  const Bytes full = data_test::concat(data_test::idx_header(0x08, {2, 3, 4}), data_test::big_endian_elements(values));
  REQUIRE(full.size() == 40);
  std::vector<size_t> lengths;
  for (size_t length = 0; length < 16; ++length) lengths.push_back(length);
  for (size_t length : {16, 17, 27, 39}) lengths.push_back(length);
  for (size_t length : lengths) {
    CAPTURE(length);
    const Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(length));
    for (bool gzip : {false, true}) {
      CAPTURE(gzip);
      const std::filesystem::path file = dir / ts::detail::concat("cut", length, gzip ? ".idx.gz" : ".idx");
      gzip ? data_test::write_gzip(file, cut) : data_test::write_raw(file, cut);
      const std::string message = error_of<ts::data::DataError>([&] { ts::data::read_idx(file); });
      REQUIRE(!message.empty());
      CHECK(contains(message, file.string()));
      // The error is at the end of what is there: the first byte that is missing.
      CHECK(contains(message, offset_text(length, gzip)));
      CHECK(contains(message, length < 16 ? "ends inside the header" : "ends inside the data"));
      if (gzip) CHECK(contains(message, "offsets are in the decompressed stream"));
    }
  }
}

TEST_CASE("IDX truncation messages say which field and how much was found") {
  TempDir dir;
  data_test::write_raw(dir / "cut.idx", Bytes{0, 0, 0x08, 2, 0, 0, 0});
  CHECK(error_of<ts::data::DataError>([&] { ts::data::read_idx(dir / "cut.idx"); }) ==
        "IDX file '" + (dir / "cut.idx").string() +
            "': at byte offset 7: the file ends inside the header: expected the big-endian u32 size of dimension 0 "
            "at bytes 4..7, found 3 of its 4 bytes");
  data_test::write_raw(dir / "short.idx", data_test::concat(data_test::idx_header(0x0C, {3}), Bytes(10, 0)));
  CHECK(error_of<ts::data::DataError>([&] { ts::data::read_idx(dir / "short.idx"); }) ==
        "IDX file '" + (dir / "short.idx").string() +
            "': at byte offset 18: the file ends inside the data: the header (type 0x0C (int32), shape [3]) "
            "promises 12 data bytes at offsets [8, 20), found 10");
}

TEST_CASE("IDX header fields that are wrong") {
  TempDir dir;
  const Bytes data(6, 1);
  SUBCASE("first two bytes not zero") {
    for_raw_and_gzip(dir, "magic.idx", data_test::concat(Bytes{0, 1, 0x08, 1, 0, 0, 0, 6}, data),
                     [&](const std::filesystem::path& file, bool gzip) {
                       std::string message = error_of<ts::data::DataError>([&] { ts::data::read_idx(file); });
                       CHECK(contains(message, file.string()));
                       CHECK(contains(message, offset_text(1, gzip)));
                       CHECK(contains(message, "expected the two zero bytes that open an IDX file, found 0x00 0x01"));
                     });
  }
  SUBCASE("a foreign file") {
    data_test::write_raw(dir / "image.png", Bytes{0x89, 'P', 'N', 'G', 13, 10, 26, 10});
    std::string message = error_of<ts::data::DataError>([&] { ts::data::read_idx(dir / "image.png"); });
    CHECK(contains(message, "byte offset 0: expected the two zero bytes that open an IDX file, found 0x89 0x50"));
  }
  SUBCASE("unknown type code") {
    for (uint8_t code : {uint8_t{0x00}, uint8_t{0x07}, uint8_t{0x0A}, uint8_t{0x0F}, uint8_t{0xFF}}) {
      CAPTURE(int{code});
      const std::filesystem::path file = dir / "type.idx";
      data_test::write_raw(file, data_test::concat(Bytes{0, 0, code, 1, 0, 0, 0, 6}, data));
      std::string message = error_of<ts::data::DataError>([&] { ts::data::read_idx(file); });
      CHECK(contains(message, "byte offset 2: expected a type code"));
      CHECK(contains(message, ts::detail::concat("found 0x", code < 16 ? "0" : "")));
    }
  }
  SUBCASE("ndim out of 1..8") {
    for (uint8_t ndim : {uint8_t{0}, uint8_t{9}, uint8_t{255}}) {
      CAPTURE(int{ndim});
      Bytes bytes{0, 0, 0x08, ndim};
      for (int d = 0; d < ndim && d < 9; ++d) data_test::append_big_endian(bytes, 1, 4);
      for_raw_and_gzip(dir, "ndim.idx", data_test::concat(bytes, Bytes{1}),
                       [&](const std::filesystem::path& file, bool gzip) {
                         std::string message = error_of<ts::data::DataError>([&] { ts::data::read_idx(file); });
                         CHECK(contains(message, offset_text(3, gzip)));
                         CHECK(contains(message, ts::detail::concat("expected the number of dimensions, 1 to 8, found ",
                                                                    int{ndim})));
                       });
    }
  }
}

TEST_CASE("IDX file longer than its header says") {
  TempDir dir;
  Bytes bytes = data_test::concat(data_test::idx_header(0x0B, {2, 3}), Bytes(12 + 3, 0));
  for_raw_and_gzip(dir, "long.idx", bytes, [&](const std::filesystem::path& file, bool gzip) {
    std::string message = error_of<ts::data::DataError>([&] { ts::data::read_idx(file); });
    CHECK(contains(message, file.string()));
    CHECK(contains(message, offset_text(12 + 12, gzip)));
    CHECK(contains(message, "expected the end of the file after the data"));
    CHECK(contains(message, "found 3 more bytes"));
  });
}

TEST_CASE("IDX sizes that overflow or promise more than the file holds") {
  TempDir dir;
  SUBCASE("element count overflows") {
    data_test::write_raw(dir / "huge.idx", data_test::idx_header(0x08, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}));
    std::string message = error_of<ts::data::DataError>([&] { ts::data::read_idx(dir / "huge.idx"); });
    // (2^32-1)^2 already exceeds 2^63: the second size is where it goes wrong.
    CHECK(contains(message, "byte offset 8: the sizes so far, [4294967295, 4294967295], have more elements"));
  }
  SUBCASE("a zero size does not excuse the others from fitting 63 bits (found by fuzz_idx)") {
    // No elements, so no data: but strides multiply the non-zero sizes and would overflow.
    data_test::write_raw(dir / "zero.idx", data_test::idx_header(0x0B, {0, 0xFF0D01, 0x16000003, 0x3FFFC02C}));
    std::string message = error_of<ts::data::DataError>([&] { ts::data::read_idx(dir / "zero.idx"); });
    CHECK(contains(message, "byte offset 16: the sizes so far, [0, 16715009, 369098755, 1073725484], have more elements"));
  }
  SUBCASE("bytes overflow") {
    data_test::write_raw(dir / "wide.idx", data_test::idx_header(0x0E, {0x7FFFFFFF, 0x7FFFFFFF}));
    std::string message = error_of<ts::data::DataError>([&] { ts::data::read_idx(dir / "wide.idx"); });
    CHECK(contains(message, "byte offset 12: shape [2147483647, 2147483647] of 0x0E (float64) elements is more bytes"));
  }
  SUBCASE("a 68 GB promise in a small file fails without allocating it") {
    Bytes bytes = data_test::concat(data_test::idx_header(0x08, {0xFFFFFFFF, 16}), Bytes(100, 7));
    for_raw_and_gzip(dir, "liar.idx", bytes, [&](const std::filesystem::path& file, bool gzip) {
      std::string message = error_of<ts::data::DataError>([&] { ts::data::read_idx(file); });
      CHECK(contains(message, "promises 68719476720 data bytes"));
      if (gzip) {  // refused from the compressed size alone, before decompressing anything
        CHECK(contains(message, offset_text(12, gzip)));
        CHECK(contains(message, "more than a gzip file of "));
        CHECK(contains(message, "bytes can hold (deflate expands at most 1032 times)"));
      } else {
        CHECK(contains(message, offset_text(12 + 100, gzip)));
        CHECK(contains(message, "found 100"));
      }
    });
  }
}

TEST_CASE("IDX gzip streams that are cut or corrupt") {
  TempDir dir;
  std::vector<uint8_t> values(4096);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint8_t>((i * 7919) >> 3);
  const Bytes compressed =
      data_test::gzip_bytes(data_test::concat(data_test::idx_header(0x08, {4096}), data_test::big_endian_elements(values)));
  SUBCASE("compressed bytes cut short, in the deflate data and in the trailer") {
    for (size_t keep : {size_t{12}, compressed.size() / 2, compressed.size() - 6, compressed.size() - 1}) {
      CAPTURE(keep);
      data_test::write_raw(dir / "cut.idx.gz", Bytes(compressed.begin(), compressed.begin() + static_cast<std::ptrdiff_t>(keep)));
      std::string message = error_of<ts::data::DataError>([&] { ts::data::read_idx(dir / "cut.idx.gz"); });
      CHECK(contains(message, (dir / "cut.idx.gz").string()));
      CHECK(contains(message, "decompressed byte offset"));
    }
  }
  SUBCASE("checksum mismatch") {
    Bytes damaged = compressed;
    damaged[damaged.size() - 8] ^= 0x55;  // the CRC-32 in the trailer
    data_test::write_raw(dir / "bad.idx.gz", damaged);
    std::string message = error_of<ts::data::DataError>([&] { ts::data::read_idx(dir / "bad.idx.gz"); });
    CHECK(contains(message, (dir / "bad.idx.gz").string()));
    CHECK(contains(message, "the gzip stream is corrupt"));
  }
}

TEST_CASE("IDX files that are missing or not files") {
  TempDir dir;
  std::string message = error_of<ts::data::DataError>([&] { ts::data::read_idx(dir / "nowhere.idx"); });
  CHECK(message == "IDX file '" + (dir / "nowhere.idx").string() + "': cannot open it: No such file or directory");
  message = error_of<ts::data::DataError>([&] { ts::data::read_idx(dir.path()); });
  CHECK(contains(message, "is a directory"));
  // A FIFO is refused before it is opened for reading, which would wait for a writer forever.
  REQUIRE(::mkfifo((dir / "fifo.idx").c_str(), 0644) == 0);
  for (bool header_only : {false, true}) {
    message = error_of<ts::data::DataError>([&] {
      header_only ? (void)ts::data::read_idx_header(dir / "fifo.idx") : (void)ts::data::read_idx(dir / "fifo.idx");
    });
    CHECK(message == "IDX file '" + (dir / "fifo.idx").string() + "': it is a FIFO (named pipe), expected a file");
  }
  // DataError is a tessera::Error, so one catch handles every library failure.
  CHECK_THROWS_AS(ts::data::read_idx(dir / "nowhere.idx"), ts::Error);
}
