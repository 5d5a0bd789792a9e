// ToTensor and Normalize against torchvision, bit for bit: transforms_reference.txt holds
// torchvision 0.14's outputs (Debian python3-torchvision, via PIL exactly as
// torchvision.datasets.MNIST) for every byte value; make_transforms_reference.py writes it
// and asserts there that torchvision equals the closed form used here. No tolerance: the
// same IEEE float32 operations in the same order give the same bits.
#include <doctest/doctest.h>

#include <bit>
#include <tessera/tessera.h>

#include "data_test_support.h"

namespace ts = tessera;
using ts::DType;
using ts::Shape;

namespace {

std::vector<uint32_t> float_bits(const ts::Tensor& t) {
  std::vector<uint32_t> bits;
  for (float v : t.to_vector<float>()) bits.push_back(std::bit_cast<uint32_t>(v));
  return bits;
}

// u8 [channels, 16, 16], each channel holding the bytes 0..255 in row-major order.
ts::Tensor every_byte(int channels) {
  std::vector<uint8_t> bytes;
  for (int c = 0; c < channels; ++c) {
    for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<uint8_t>(b));
  }
  return ts::tensor<uint8_t>(bytes, {channels, 16, 16});
}

}  // namespace

TEST_CASE("ToTensor and Normalize are bit-identical to torchvision") {
  const auto reference = data_test::load_transforms_reference();
  REQUIRE(reference.size() == 5);

  const auto& plain = reference.at("to_tensor");
  REQUIRE(plain.bits.size() == 256);
  ts::Tensor x = ts::data::to_tensor(every_byte(1));
  CHECK(x.dtype() == DType::f32);
  CHECK(x.sizes() == Shape{1, 16, 16});
  CHECK(float_bits(x) == plain.bits);
  for (int b = 0; b < 256; ++b) CHECK(std::bit_cast<uint32_t>(ts::data::to_unit_float(static_cast<uint8_t>(b))) == plain.bits[b]);

  for (const char* name : {"mnist", "fashion_mnist", "half", "imagenet_rgb"}) {
    CAPTURE(name);
    const auto& expected = reference.at(name);
    REQUIRE(expected.bits.size() == static_cast<size_t>(256 * expected.channels));
    ts::data::Normalize normalize(expected.mean, expected.std);
    ts::Tensor input = ts::data::to_tensor(every_byte(expected.channels));
    ts::Tensor out = normalize(input);
    CHECK(out.sizes() == input.sizes());
    CHECK(float_bits(out) == expected.bits);
    // A batch dimension in front changes nothing.
    CHECK(float_bits(normalize(input.unsqueeze(0))) == expected.bits);
    // The scalar form the datasets use per pixel.
    for (int c = 0; c < expected.channels; ++c) {
      for (int b = 0; b < 256; ++b) {
        float value = normalize.apply(ts::data::to_unit_float(static_cast<uint8_t>(b)), c);
        CHECK(std::bit_cast<uint32_t>(value) == expected.bits[static_cast<size_t>(c * 256 + b)]);
      }
    }
  }
  // The named constants are the reference's statistics.
  CHECK(ts::data::kMnistNormalize.mean == reference.at("mnist").mean);
  CHECK(ts::data::kMnistNormalize.std == reference.at("mnist").std);
  CHECK(ts::data::kFashionMnistNormalize.mean == reference.at("fashion_mnist").mean);
  CHECK(ts::data::kFashionMnistNormalize.std == reference.at("fashion_mnist").std);
}

TEST_CASE("Normalize on float64 rounds mean and std to float64, as torchvision") {
  ts::Tensor x = ts::tensor<double>({0.0, 0.5, 1.0, 0.25}, {1, 2, 2});
  ts::Tensor out = ts::data::Normalize{0.1307, 0.3081}(x);
  CHECK(out.dtype() == DType::f64);
  std::vector<double> got = out.to_vector<double>();
  std::vector<double> in = x.to_vector<double>();
  for (size_t i = 0; i < in.size(); ++i) CHECK(got[i] == (in[i] - 0.1307) / 0.3081);
}

TEST_CASE("transform errors") {
  CHECK_THROWS_AS(ts::data::to_tensor(ts::zeros({2, 2})), ts::DTypeError);
  CHECK_THROWS_AS(ts::data::Normalize(0.5, 0.0), ts::ValueError);
  CHECK_THROWS_AS(ts::data::Normalize({0.5, 0.5}, {0.5}), ts::ValueError);
  CHECK_THROWS_AS(ts::data::Normalize({0.1, 0.2}, {1.0, 1.0})(ts::zeros({3, 4, 4})), ts::ShapeError);
  CHECK_THROWS_AS(ts::data::kMnistNormalize(ts::zeros({4, 4})), ts::ShapeError);
  CHECK_THROWS_AS(ts::data::kMnistNormalize(ts::zeros({1, 4, 4}, {.dtype = DType::i64})), ts::DTypeError);
}
