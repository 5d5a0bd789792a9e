// safetensors: round trips of every dtype and layout, byte-for-byte agreement with a file
// PyTorch wrote (tests/io/make_reference.py), partial reads, atomic saves that fail without
// harm, and hostile files (truncated at every header byte, flipped bits, bad offsets,
// unknown dtypes, ...) that must each be a FormatError naming the file, never a crash.
#include <doctest/doctest.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sys/resource.h>
#include <sys/stat.h>
#include <tessera/tessera.h>

#include "temp_dir.h"
#include "test_support.h"

namespace ts = tessera;
namespace io = tessera::io;
using ts::DType;
using ts::Shape;
using ts::Tensor;
using ts::testing::read_file_bytes;
using ts::testing::TempDir;
using ts::testing::write_file_bytes;

using test_support::contains;

namespace {

std::string source_dir() {
  const char* dir = std::getenv("TESSERA_SOURCE_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "TESSERA_SOURCE_DIR is not set (meson test sets it)");
  return dir;
}

std::string reference_path() { return source_dir() + "/tests/io/data/pytorch_reference.safetensors"; }

// The bytes of a contiguous CPU copy (empty for empty tensors).
std::string tensor_bytes(const Tensor& t) {
  Tensor c = t.contiguous();
  if (c.nbytes() == 0) return {};
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

void check_same_tensor(const Tensor& actual, const Tensor& expected) {
  CHECK(actual.dtype() == expected.dtype());
  CHECK(actual.sizes() == expected.sizes());
  CHECK(actual.device().is_cpu());
  CHECK(actual.is_contiguous());
  CHECK(tensor_bytes(actual) == tensor_bytes(expected));
}

void check_same_dict(const ts::StateDict& actual, const ts::StateDict& expected) {
  REQUIRE(actual.keys() == expected.keys());
  for (const auto& [name, tensor] : expected) {
    CAPTURE(name);
    check_same_tensor(actual.at(name), tensor);
  }
}

Tensor bf16(const std::vector<float>& values, const Shape& shape) {
  std::vector<ts::BFloat16> bits;
  for (float v : values) bits.emplace_back(v);
  return ts::from_data(bits.data(), shape, DType::bf16);
}

// What tests/io/make_reference.py writes, rebuilt here.
ts::StateDict reference_tensors() {
  ts::StateDict d;
  d.insert("weight", ts::arange(12, {.dtype = DType::f32}).view({3, 4}) * 0.5 - 1);
  d.insert("bias_f64", ts::tensor<double>({0.1, -2.5, 3.0}));
  d.insert("labels", ts::tensor<int64_t>({3, -1, 7, 0}));
  d.insert("pixels", ts::tensor<uint8_t>({0, 127, 128, 255}, {2, 2}));
  d.insert("half_precision", bf16({1.0f, -2.0f, 0.5f, 3.140625f}, {4}));
  d.insert("scalar", ts::full({}, 2.5));
  d.insert("empty", ts::zeros({0, 3}));
  d.insert("transposed", ts::arange(6, {.dtype = DType::f32}).view({2, 3}).t());
  d.insert("caf\xc3\xa9.\"quoted\"\\name", ts::tensor<float>({1.0f}));
  return d;
}
const io::Metadata reference_metadata = {{"format", "pt"}, {"written_by", "tests/io/make_reference.py"}};

// A safetensors file from a header text (padded here) and data bytes, for hand-made cases.
std::string file_bytes(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  uint64_t length = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &length, 8);
  return out + header + data;
}

// The message of the FormatError `f` throws; fails the test when it throws nothing. Other
// exception types propagate and fail the test too.
std::string format_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const io::FormatError& e) {
    return e.what();
  }
  FAIL("expected a FormatError");
  return {};
}

}  // namespace

TEST_CASE("safetensors: the header example saves and loads") {
  TempDir dir;
  std::string path = dir.file("model.safetensors");
  ts::Generator gen(7);
  ts::StateDict weights;
  weights.insert("fc.weight", ts::randn({4, 3}, gen));
  io::save(weights, path, {{"epoch", "3"}});
  ts::StateDict back = io::load(path);
  check_same_dict(back, weights);
  io::SafetensorsFile file(path);
  Tensor row = file.read_slice("fc.weight", 3, 3);
  CHECK(row.sizes() == Shape{3});
  CHECK(row.to_vector<float>() == weights.at("fc.weight")[1].to_vector<float>());
  CHECK(io::load_metadata(path) == io::Metadata{{"epoch", "3"}});
}

TEST_CASE("safetensors: every dtype and layout round-trips bit for bit") {
  TempDir dir;
  ts::Generator gen(1234);
  ts::StateDict d;
  d.insert("f32", ts::randn({3, 5}, gen));
  d.insert("f64", ts::randn({2, 3, 4}, gen, {.dtype = DType::f64}));
  d.insert("i64", ts::randint(-1000000, 1000000, {7}, gen));
  d.insert("u8", ts::randint(0, 256, {4, 4}, gen, {.dtype = DType::u8}));
  d.insert("bf16", ts::randn({6}, gen).to(DType::bf16));
  d.insert("bool", ts::randn({3, 4}, gen) > 0.0);
  // Non-contiguous views: transposed, narrowed with an offset, expanded (stride 0), permuted.
  d.insert("f64.transposed", ts::randn({4, 3}, gen, {.dtype = DType::f64}).t());
  d.insert("i64.narrowed", ts::arange(20).view({4, 5}).narrow(1, 2, 2));
  d.insert("u8.expanded", ts::tensor<uint8_t>({1, 2, 3}, {3, 1}).expand({3, 4}));
  d.insert("bf16.permuted", ts::randn({2, 3, 4}, gen).to(DType::bf16).permute({2, 0, 1}));
  // 0-d and empty tensors.
  d.insert("f32.scalar", ts::full({}, -0.25));
  d.insert("i64.scalar", ts::full({}, 42, {.dtype = DType::i64}));
  d.insert("f32.empty", ts::zeros({0}));
  d.insert("i64.empty", ts::zeros({2, 0, 3}, {.dtype = DType::i64}));
  d.insert("bf16.empty", ts::zeros({0, 1}, {.dtype = DType::bf16}));
  REQUIRE_FALSE(d.at("f64.transposed").is_contiguous());
  REQUIRE_FALSE(d.at("u8.expanded").is_contiguous());
  // As in PyTorch, a tensor without elements is contiguous whatever its strides.
  CHECK(d.at("i64.empty").is_contiguous());

  std::string path = dir.file("all.safetensors");
  io::Metadata metadata = {{"step", "100"}, {"note", "caf\xc3\xa9 \"quoted\"\n"}, {"", ""}};
  io::save(d, path, metadata);
  check_same_dict(io::load(path), d);
  CHECK(io::load_metadata(path) == metadata);
  CHECK(dir.entries() == std::vector<std::string>{"all.safetensors"});

  // Values survive as values, not just as bytes of the same thing.
  ts::StateDict back = io::load(path);
  CHECK(back.at("u8.expanded").to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  CHECK(back.at("i64.narrowed").to_vector<int64_t>() == std::vector<int64_t>{2, 3, 7, 8, 12, 13, 17, 18});
  CHECK(back.at("f32.scalar").item<float>() == -0.25f);
  CHECK(back.at("i64.scalar").dim() == 0);
  CHECK(back.at("bool").dtype() == DType::boolean);
  CHECK(back.at("bool").to_vector<bool>() == d.at("bool").to_vector<bool>());

  // An empty dict is a valid file too, as is a tensor whose gradient is tracked.
  io::save(ts::StateDict{}, dir.file("empty.safetensors"));
  CHECK(io::load(dir.file("empty.safetensors")).empty());
  CHECK(read_file_bytes(dir.file("empty.safetensors")) == file_bytes("{}", ""));
  ts::StateDict with_grad;
  with_grad.insert("p", ts::ones({2}).requires_grad_());
  io::save(with_grad, dir.file("grad.safetensors"));
  check_same_dict(io::load(dir.file("grad.safetensors")), with_grad);
}

TEST_CASE("safetensors: the layout is the Hugging Face format to the byte") {
  TempDir dir;
  ts::StateDict d;
  d.insert("b", ts::tensor<float>({1.0f, 2.0f}));
  d.insert("a", ts::tensor<uint8_t>({7}));
  std::string path = dir.file("tiny.safetensors");
  io::save(d, path, {{"k", "v"}});
  std::string header =
      R"({"__metadata__":{"k":"v"},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("a":{"dtype":"U8","shape":[1],"data_offsets":[8,9]}})";
  float values[2] = {1.0f, 2.0f};
  std::string data(reinterpret_cast<const char*>(values), 8);
  data += '\x07';
  std::string expected = file_bytes(header, data);
  std::string actual = read_file_bytes(path);
  CHECK(actual == expected);
  CHECK((actual.size() - data.size()) % 8 == 0);  // header padded with spaces to 8
  CHECK(header.size() == 131);
  CHECK(actual.substr(0, 8) == std::string("\x88\0\0\0\0\0\0\0", 8));  // 136 = 131 padded, little-endian
  CHECK(actual[8 + header.size()] == ' ');
}

TEST_CASE("safetensors: PyTorch's file loads, and Tessera writes the same bytes") {
  std::string reference = reference_path();
  ts::StateDict expected = reference_tensors();
  ts::StateDict loaded = io::load(reference);
  check_same_dict(loaded, expected);
  CHECK(io::load_metadata(reference) == reference_metadata);
  CHECK(loaded.at("half_precision").to_vector<float>() == std::vector<float>{1.0f, -2.0f, 0.5f, 3.140625f});
  CHECK(loaded.at("bias_f64").to_vector<double>() == std::vector<double>{0.1, -2.5, 3.0});
  CHECK(loaded.at("transposed").to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});

  TempDir dir;
  std::string ours = dir.file("tessera.safetensors");
  io::save(expected, ours, reference_metadata);
  CHECK(read_file_bytes(ours) == read_file_bytes(reference));
}

TEST_CASE("safetensors: SafetensorsFile reads the header, whole tensors and slices") {
  io::SafetensorsFile file(reference_path());
  CHECK(file.keys() == reference_tensors().keys());
  CHECK(file.metadata() == reference_metadata);
  const io::TensorEntry& weight = file.entry("weight");
  CHECK(weight.dtype == DType::f32);
  CHECK(weight.shape == Shape{3, 4});
  CHECK(weight.numel() == 12);
  CHECK(weight.data_begin == 0);
  CHECK(weight.data_end == 48);
  CHECK(file.data_offset() % 8 == 0);
  CHECK(file.file_size() == read_file_bytes(reference_path()).size());
  CHECK(file.contains("labels"));
  CHECK_FALSE(file.contains("nope"));

  CHECK(file.read_slice("weight", 5, 4).to_vector<float>() == std::vector<float>{1.5f, 2.0f, 2.5f, 3.0f});
  CHECK(file.read_slice("labels", 1, 2).to_vector<int64_t>() == std::vector<int64_t>{-1, 7});
  CHECK(file.read_slice("half_precision", 3, 1).to_vector<float>() == std::vector<float>{3.140625f});
  CHECK(file.read_slice("weight", 12, 0).numel() == 0);
  CHECK(file.read_slice("empty", 0, 0).numel() == 0);
  Tensor shard = ts::zeros({3}, {.dtype = DType::f64});
  file.read_into("bias_f64", 0, shard);
  CHECK(shard.to_vector<double>() == std::vector<double>{0.1, -2.5, 3.0});

  CHECK_THROWS_AS(file.read_slice("weight", 10, 3), ts::IndexError);
  CHECK_THROWS_AS(file.read_slice("weight", -1, 2), ts::IndexError);
  CHECK_THROWS_AS(file.read_slice("weight", 0, -1), ts::IndexError);
  CHECK_THROWS_AS(file.read_slice("nope", 0, 1), ts::ValueError);
  Tensor wrong_dtype = ts::zeros({2}, {.dtype = DType::f64});
  CHECK_THROWS_AS(file.read_into("weight", 0, wrong_dtype), ts::DTypeError);
  Tensor strided = ts::zeros({4, 2}).t();
  CHECK_THROWS_AS(file.read_into("weight", 0, strided), ts::ValueError);

  io::SafetensorsFile moved = std::move(file);
  CHECK(moved.read("scalar").item<float>() == 2.5f);
}

TEST_CASE("safetensors: a file truncated anywhere is a FormatError naming it") {
  TempDir dir;
  std::string bytes = read_file_bytes(reference_path());
  io::SafetensorsFile whole(reference_path());
  uint64_t data_start = whole.data_offset();
  std::vector<uint64_t> cuts;
  for (uint64_t cut = 0; cut < data_start; ++cut) cuts.push_back(cut);  // every header byte
  for (uint64_t cut : {data_start, data_start + 1, data_start + 47, data_start + 100, bytes.size() - 1}) {
    cuts.push_back(cut);
  }
  std::string path = dir.file("truncated.safetensors");
  for (uint64_t cut : cuts) {
    CAPTURE(cut);
    write_file_bytes(path, bytes.substr(0, cut));
    std::string message = format_error_of([&] { io::load(path); });
    CHECK(contains(message, path));
    CHECK(contains(message, ": byte "));
  }
  write_file_bytes(path, bytes.substr(0, 5));
  CHECK(format_error_of([&] { io::load(path); }) ==
        path + ": byte 0: the file is 5 bytes, too short for the 8-byte header length");
  write_file_bytes(path, bytes.substr(0, bytes.size() - 1));
  CHECK(contains(format_error_of([&] { io::load(path); }), "tensor 'caf\xc3\xa9.\"quoted\"\\name': data_offsets"));
}

TEST_CASE("safetensors: every flipped bit of the header length is caught") {
  TempDir dir;
  std::string bytes = read_file_bytes(reference_path());
  std::string path = dir.file("flipped.safetensors");
  for (int bit = 0; bit < 64; ++bit) {
    CAPTURE(bit);
    std::string damaged = bytes;
    damaged[static_cast<size_t>(bit / 8)] = static_cast<char>(damaged[static_cast<size_t>(bit / 8)] ^ (1 << (bit % 8)));
    write_file_bytes(path, damaged);
    CHECK(contains(format_error_of([&] { io::load(path); }), path));
  }
}

TEST_CASE("safetensors: flipped bits anywhere in the header load or fail cleanly") {
  // Some flips give another valid file (a renamed tensor, a changed metadata string); the
  // rest must be FormatErrors. Anything else (a crash, another exception) fails the test.
  TempDir dir;
  std::string bytes = read_file_bytes(reference_path());
  uint64_t data_start = io::SafetensorsFile(reference_path()).data_offset();
  std::string path = dir.file("flipped.safetensors");
  int rejected = 0, loaded = 0;
  for (uint64_t byte = 8; byte < data_start; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = bytes;
      damaged[byte] = static_cast<char>(damaged[byte] ^ (1 << bit));
      write_file_bytes(path, damaged);
      try {
        io::load(path);
        ++loaded;
      } catch (const io::FormatError& e) {
        if (!contains(e.what(), path)) FAIL("message does not name the file: " << e.what());
        ++rejected;
      }
    }
  }
  CHECK(rejected > loaded);
  CHECK(loaded > 0);
}

TEST_CASE("safetensors: impossible header lengths") {
  TempDir dir;
  std::string path = dir.file("bad.safetensors");
  auto with_length = [&](uint64_t length, const std::string& rest) {
    std::string out(8, '\0');
    std::memcpy(out.data(), &length, 8);
    write_file_bytes(path, out + rest);
  };
  with_length(~uint64_t{0}, "{}");
  CHECK(format_error_of([&] { io::load(path); }) ==
        path + ": byte 0: header length 18446744073709551615 exceeds the limit of 100000000 bytes (a corrupt length?)");
  with_length(100'000'001, "{}");
  CHECK(contains(format_error_of([&] { io::load(path); }), "exceeds the limit"));
  with_length(3, "{}");
  CHECK(format_error_of([&] { io::load(path); }) ==
        path + ": byte 0: header length 3 runs past the end of the file (10 bytes; is it truncated?)");
  with_length(0, "");
  CHECK(contains(format_error_of([&] { io::load(path); }), path + ": byte 8: invalid JSON header: expected a value"));
  with_length(2, "{}");  // unpadded but valid
  CHECK(io::load(path).empty());
}

TEST_CASE("safetensors: hostile headers are FormatErrors naming file, tensor and byte") {
  TempDir dir;
  std::string path = dir.file("hostile.safetensors");
  std::string data(64, '\x01');
  auto error_for = [&](const std::string& header, const std::string& payload) {
    write_file_bytes(path, file_bytes(header, payload));
    return format_error_of([&] { io::load(path); });
  };
  auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
  };

  // Invalid JSON: the offset is in the file (8 bytes of length before the header).
  CHECK(error_for("{\"a\":[1,]}", data) == path + ": byte 16: invalid JSON header: expected a value (object, array, "
                                                  "string, number, true, false or null), found ']'");
  CHECK(error_for("[1, 2]", data) == path + ": byte 8: the header must be a JSON object, found an array");
  CHECK(contains(error_for("{\"w\":{}} x", data), "byte 17: invalid JSON header: expected the end of the text"));

  // Overlapping and oversized offsets.
  std::string message = error_for("{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("b", "F32", "[2]", "[4,12]") + "}", data);
  // The offset of an overlap is where the later tensor's bytes start: 8 + 112 (padded header) + 4.
  CHECK(message == path + ": byte 124: tensor 'b': data_offsets [4, 12] overlap tensor 'a' at [0, 8]");
  message = error_for("{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("b", "F32", "[2]", "[0,8]") + "}", data);
  CHECK(contains(message, "overlap"));
  message = error_for("{" + entry("a", "F32", "[20]", "[0,80]") + "}", data);
  CHECK(message == path + ": byte 56: tensor 'a': data_offsets [0, 80] end past the data section, which holds 64 "
                          "bytes (is the file truncated?)");
  CHECK(contains(error_for("{" + entry("a", "U8", "[0]", "[9,8]") + "}", data), "tensor 'a': data_offsets [9, 8]: begin is after end"));
  CHECK(contains(error_for("{" + entry("a", "U8", "[1]", "[-1,0]") + "}", data), "data_offsets: expected non-negative integers"));
  CHECK(contains(error_for("{" + entry("a", "U8", "[1]", "[0]") + "}", data), "data_offsets: expected [begin, end]"));
  CHECK(contains(error_for("{" + entry("a", "U8", "[1]", "[0,1.0]") + "}", data), "data_offsets: expected non-negative integers"));
  // A huge end must not wrap around when compared with the data size.
  CHECK(contains(error_for("{" + entry("a", "U8", "[1]", "[9223372036854775807,9223372036854775807]") + "}", data),
                 "end past the data section"));

  // Wrong byte counts, including shapes whose byte count overflows.
  CHECK(error_for("{" + entry("w", "F32", "[3]", "[0,8]") + "}", data) ==
        path + ": byte 55: tensor 'w': data_offsets [0, 8] hold 8 bytes, but F32 shape [3] needs 12");
  CHECK(contains(error_for("{" + entry("w", "F64", "[4611686018427387904]", "[0,8]") + "}", data),
                 "shape [4611686018427387904] is too large to address"));
  CHECK(contains(error_for("{" + entry("w", "U8", "[4294967296,4294967296]", "[0,8]") + "}", data),
                 "has more elements than int64 can count"));
  CHECK(contains(error_for("{" + entry("w", "U8", "[4294967296,4294967296,0]", "[0,0]") + "}", data),
                 "has more elements than int64 can count"));
  CHECK(contains(error_for("{" + entry("w", "U8", "[2,-1]", "[0,0]") + "}", data), "shape: expected non-negative integers"));
  CHECK(contains(error_for("{" + entry("w", "U8", "[1.5]", "[0,1]") + "}", data), "shape: expected non-negative integers"));
  CHECK(contains(error_for("{" + entry("w", "U8", "3", "[0,3]") + "}", data), "shape: expected an array, found an integer"));

  // Unknown and unsupported dtypes name the dtype and the tensor.
  CHECK(error_for("{" + entry("h", "F16", "[2]", "[0,4]") + "}", data) ==
        path + ": byte 22: tensor 'h': dtype \"F16\" is not supported by Tessera (Tessera reads F32, F64, I64, U8, BF16 "
               "and BOOL)");
  CHECK(contains(error_for("{" + entry("i", "I32", "[2]", "[0,8]") + "}", data), "tensor 'i': dtype \"I32\" is not supported"));
  CHECK(contains(error_for("{" + entry("x", "float32", "[2]", "[0,8]") + "}", data), "tensor 'x': unknown dtype \"float32\""));
  CHECK(contains(error_for("{\"x\":{\"dtype\":3,\"shape\":[],\"data_offsets\":[0,1]}}", data), "dtype: expected a string"));

  // Duplicates, missing and unexpected members, a non-object entry, bad metadata.
  CHECK(error_for("{" + entry("w", "U8", "[1]", "[0,1]") + "," + entry("w", "U8", "[1]", "[1,2]") + "}", data) ==
        path + ": byte 61: invalid JSON header: expected unique keys, but \"w\" repeats");
  CHECK(contains(error_for("{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", data), "tensor 'w': missing \"data_offsets\""));
  CHECK(contains(error_for("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", data),
                 "unexpected member \"x\""));
  CHECK(contains(error_for("{\"w\":[1]}", data), "tensor 'w': expected an object, found an array"));
  CHECK(error_for("{\"__metadata__\":{\"a\":\"b\",\"n\":1}}", data) ==
        path + ": byte 37: __metadata__ \"n\": expected a string, found an integer");
  CHECK(contains(error_for("{\"__metadata__\":[]}", data), "__metadata__: expected an object of strings"));
  CHECK(contains(error_for("{\"__metadata__\":{\"a\":\"b\",\"a\":\"c\"}}", data), "\"a\" repeats"));

  // A file whose header is fine loads, gaps between tensors and zero-sized ones included.
  write_file_bytes(path, file_bytes("{" + entry("a", "U8", "[2]", "[4,6]") + "," + entry("z", "F32", "[0]", "[4,4]") + "}",
                                    std::string("\0\0\0\0\x05\x06", 6)));
  ts::StateDict ok = io::load(path);
  CHECK(ok.at("a").to_vector<uint8_t>() == std::vector<uint8_t>{5, 6});
  CHECK(ok.at("z").numel() == 0);

  // BOOL, as PyTorch writes torch.bool: one byte each, and only 0 or 1 is a bool.
  const std::string bool_file = file_bytes("{" + entry("m", "BOOL", "[4]", "[0,4]") + "}", std::string("\1\0\1\1", 4));
  write_file_bytes(path, bool_file);
  CHECK(io::load(path).at("m").to_vector<bool>() == std::vector<bool>{true, false, true, true});
  const std::string bad_bool = file_bytes("{" + entry("m", "BOOL", "[4]", "[0,4]") + "}", std::string("\1\0\2\1", 4));
  const uint64_t third_byte = bad_bool.size() - 4 + 2;
  CHECK(error_for("{" + entry("m", "BOOL", "[4]", "[0,4]") + "}", std::string("\1\0\2\1", 4)) ==
        path + ": byte " + std::to_string(third_byte) + ": tensor 'm': BOOL element 2 holds the byte 2; a bool must be 0 or 1");
  // A partial read checks the bytes it reads, with their place in the file.
  io::SafetensorsFile partial(path);
  CHECK(partial.read_slice("m", 0, 2).to_vector<bool>() == std::vector<bool>{true, false});
  CHECK(contains(format_error_of([&] { partial.read_slice("m", 1, 3); }),
                 "byte " + std::to_string(third_byte) + ": tensor 'm': BOOL element 2 holds the byte 2"));
  // Reading into a tensor of one's own leaves no invalid byte in it when it fails.
  Tensor destination = ts::ones({4}, {.dtype = DType::boolean});
  CHECK_THROWS_AS(partial.read_into("m", 0, destination), io::FormatError);
  CHECK(destination.to_vector<uint8_t>() == std::vector<uint8_t>{0, 0, 0, 0});
}

TEST_CASE("safetensors: a missing or unreadable file is an IOError naming it") {
  TempDir dir;
  std::string missing = dir.file("missing.safetensors");
  try {
    io::load(missing);
    FAIL("expected an IOError");
  } catch (const io::FormatError&) {
    FAIL("a missing file is not a format error");
  } catch (const io::IOError& e) {
    CHECK(std::string(e.what()) == "cannot open '" + missing + "': No such file or directory");
  }
  CHECK_THROWS_AS(io::load(dir.path().string()), io::IOError);  // a directory
  CHECK_THROWS_AS(io::load_metadata(missing), io::IOError);
  // A FIFO is refused before it is opened for reading, which would wait for a writer forever.
  const std::string fifo = dir.file("fifo.safetensors");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  try {
    io::load(fifo);
    FAIL("expected an IOError");
  } catch (const io::IOError& e) {
    CHECK(std::string(e.what()) == "cannot read '" + fifo + "': it is a FIFO (named pipe), not a regular file");
  }
}

TEST_CASE("safetensors: save refuses what it cannot write before touching the disk") {
  TempDir dir;
  std::string path = dir.file("x.safetensors");
  ts::StateDict undefined;
  undefined.insert("w", Tensor());
  CHECK_THROWS_AS(io::save(undefined, path), ts::ValueError);
  ts::StateDict reserved;
  reserved.insert("__metadata__", ts::zeros({1}));
  CHECK_THROWS_AS(io::save(reserved, path), ts::ValueError);
  ts::StateDict bad_name;
  bad_name.insert("\xff", ts::zeros({1}));
  CHECK_THROWS_AS(io::save(bad_name, path), ts::ValueError);
  CHECK(dir.entries().empty());
}

TEST_CASE("AtomicFile: nothing appears before commit, and an abandoned file leaves no trace") {
  TempDir dir;
  std::string path = dir.file("data.bin");
  {
    io::AtomicFile file(path);
    file.write("abc", 3);
    CHECK(dir.entries().size() == 1);  // only the temporary
    CHECK_FALSE(std::filesystem::exists(path));
    CHECK(file.temp_path().find(dir.file(".data.bin.tmp-")) == 0);
    file.commit();
  }
  CHECK(read_file_bytes(path) == "abc");
  {
    io::AtomicFile file(path);
    file.write("replaced", 8);
  }  // never committed
  CHECK(read_file_bytes(path) == "abc");
  CHECK(dir.entries() == std::vector<std::string>{"data.bin"});
}

TEST_CASE("safetensors: saves are atomic") {
  TempDir dir;
  std::string path = dir.file("model.safetensors");
  ts::Generator gen(3);
  ts::StateDict first;
  first.insert("w", ts::randn({8, 8}, gen));
  io::save(first, path);
  std::string original = read_file_bytes(path);

  SUBCASE("into a directory that does not exist") {
    std::string nowhere = dir.file("no/such/dir/model.safetensors");
    try {
      io::save(first, nowhere);
      FAIL("expected an IOError");
    } catch (const io::IOError& e) {
      CHECK(contains(e.what(), "cannot save '" + nowhere + "'"));
      CHECK(contains(e.what(), "No such file or directory"));
    }
  }

  SUBCASE("a tensor whose data cannot be read fails the save half-way") {
    // An FSDP-released storage: data_ptr() throws after the header and "a" are written.
    ts::StateDict broken;
    broken.insert("a", ts::randn({1000}, gen));
    Tensor released = ts::randn({4, 4}, gen);
    released.storage()->resize(0);
    broken.insert("released", released);
    CHECK_THROWS_AS(io::save(broken, path), ts::ValueError);
  }

  SUBCASE("the disk refuses the bytes") {
    // A file-size limit makes write() fail with EFBIG, as a full disk fails with ENOSPC.
    ts::StateDict big;
    big.insert("w", ts::randn({64, 1024}, gen));
    rlimit saved_limit{};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &saved_limit) == 0);
    auto saved_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = saved_limit;
    small.rlim_cur = 16384;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
    std::string message;
    try {
      io::save(big, path);
    } catch (const io::IOError& e) {
      message = e.what();
    }
    setrlimit(RLIMIT_FSIZE, &saved_limit);
    std::signal(SIGXFSZ, saved_handler);
    CHECK(contains(message, "cannot save '" + path + "': cannot write '"));
    CHECK(contains(message, "File too large"));
  }

  SUBCASE("over a directory") {
    std::string directory = dir.file("a_directory");
    std::filesystem::create_directory(directory);
    CHECK_THROWS_AS(io::save(first, directory), io::IOError);
    CHECK(std::filesystem::is_directory(directory));
    std::filesystem::remove(directory);
  }

  // Whatever failed, the previous file is whole and no temporary file is left behind.
  CHECK(read_file_bytes(path) == original);
  CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});
  check_same_dict(io::load(path), first);

  // And a save that succeeds replaces it.
  ts::StateDict second;
  second.insert("w", ts::zeros({2}));
  io::save(second, path);
  check_same_dict(io::load(path), second);
  CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});
}
