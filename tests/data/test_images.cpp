// Image decoding and transforms against PIL and torchvision (make_image_reference.py wrote
// the files in images/ with PIL and what torchvision makes of them): decoded RGB bytes,
// Resize / CenterCrop / flip outputs and the float pipeline must be equal, byte for byte
// and bit for bit. Then the encoders, the flip's keying, and the errors for corrupt files.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <fstream>
#include <set>
#include <sstream>
#include <tessera/tessera.h>

#include "data_test_support.h"
#include "test_support.h"

namespace ts = tessera;
namespace data = tessera::data;
using data::Image;
using ts::Tensor;

using test_support::error_of;

namespace {

const bool kCodecs = data::png_supported() && data::jpeg_supported();

std::filesystem::path images_dir() {
  const char* dir = std::getenv("TESSERA_SOURCE_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "TESSERA_SOURCE_DIR is not set (meson test sets it)");
  return std::filesystem::path(dir) / "tests/data/images";
}

struct Reference {
  ts::StateDict tensors;
  ts::io::Metadata metadata;
};

const Reference& reference() {
  static const Reference loaded = [] {
    const std::string path = (images_dir() / "image_reference.safetensors").string();
    return Reference{ts::io::load(path), ts::io::load_metadata(path)};
  }();
  return loaded;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) out.push_back(part);
  return out;
}

// An Image as a uint8 [H, W, C] tensor, the layout of np.asarray(pil_image).
Tensor as_tensor(const Image& image) {
  return ts::from_data(image.pixels.data(), {image.height, image.width, image.channels}, ts::DType::u8);
}

void check_equal(const Image& image, const Tensor& expected, const std::string& what) {
  CAPTURE(what);
  REQUIRE(expected.dtype() == ts::DType::u8);
  REQUIRE(Tensor(as_tensor(image)).sizes() == expected.sizes());
  const std::vector<uint8_t> want = expected.to_vector<uint8_t>();
  size_t differing = 0;
  for (size_t i = 0; i < want.size(); ++i) differing += image.pixels[i] != want[i];
  CHECK(differing == 0);
}

data::ImageTransform transform_for(const std::string& name) {
  if (name == "resize_24") return data::Resize(24);
  if (name == "resize_56") return data::Resize(56);
  if (name == "resize_17x29") return data::Resize(17, 29);
  if (name == "resize_40_crop_32") {
    return [](const Image& image, const data::SampleKey& key) { return data::CenterCrop(32)(data::Resize(40)(image, key)); };
  }
  if (name == "crop_60") return data::CenterCrop(60);
  if (name == "crop_11x20") return data::CenterCrop(11, 20);
  if (name == "crop_12x21") return data::CenterCrop(12, 21);
  if (name == "hflip") return data::RandomHorizontalFlip(1.0);
  FAIL("no transform for case ", name);
  return {};
}

std::vector<uint8_t> file_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("PNG and JPEG files decode to the RGB bytes PIL gives" * doctest::skip(!kCodecs)) {
  const std::vector<std::string> files = split(reference().metadata.at("files"));
  CHECK(files.size() == 10);
  for (const std::string& name : files) {
    Image image = data::read_image(images_dir() / name);
    CHECK(image.channels == 3);
    check_equal(image, reference().tensors.at(name + "/decoded"), name + " decoded");
  }
}

TEST_CASE("Resize, CenterCrop and flips equal torchvision's on PIL images, byte for byte" * doctest::skip(!kCodecs)) {
  for (const std::string& name : split(reference().metadata.at("files"))) {
    Image image = data::read_image(images_dir() / name);
    for (const std::string& c : split(reference().metadata.at("cases"))) {
      check_equal(transform_for(c)(image, {}), reference().tensors.at(name + "/" + c), name + " " + c);
    }
  }
}

TEST_CASE("Resize, CenterCrop, ToTensor and Normalize give torchvision's float32 batch, bit for bit" *
          doctest::skip(!kCodecs)) {
  const std::vector<data::ImageTransform> transforms = {data::Resize(36), data::CenterCrop(32)};
  for (const std::string& name : split(reference().metadata.at("files"))) {
    CAPTURE(name);
    Image image = data::apply_transforms(transforms, data::read_image(images_dir() / name), {});
    Tensor x = data::kImageNetNormalize(data::to_tensor(image));
    const Tensor& expected = reference().tensors.at(name + "/pipeline");
    REQUIRE(x.sizes() == expected.sizes());
    CHECK(x.to_vector<float>() == expected.to_vector<float>());
  }
}

TEST_CASE("Resize's output size follows torchvision: the shorter side, the longer int(s * long / short)") {
  CHECK(data::Resize(24).output_size(41, 57) == std::pair<int64_t, int64_t>{24, 33});  // int(24 * 57 / 41) = 33
  CHECK(data::Resize(24).output_size(57, 41) == std::pair<int64_t, int64_t>{33, 24});
  CHECK(data::Resize(256).output_size(375, 500) == std::pair<int64_t, int64_t>{256, 341});
  CHECK(data::Resize(10).output_size(30, 30) == std::pair<int64_t, int64_t>{10, 10});
  CHECK(data::Resize(7, 9).output_size(100, 3) == std::pair<int64_t, int64_t>{7, 9});
  // Resizing to the same size is the identity (PIL copies).
  Image image(5, 6);
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = static_cast<uint8_t>(i * 7);
  CHECK(data::resize_bilinear(image, 5, 6) == image);
  CHECK_THROWS_AS(data::Resize(0), ts::ValueError);
  CHECK_THROWS_AS(data::CenterCrop(3, 0), ts::ValueError);
}

TEST_CASE("RandomHorizontalFlip is keyed by (seed, epoch, index): reproducible, about p of the samples") {
  data::RandomHorizontalFlip flip(0.5);
  int flipped = 0, same_as_next_epoch = 0;
  for (int64_t index = 0; index < 4000; ++index) {
    const bool f = flip.flips({.seed = 3, .epoch = 2, .index = index});
    CHECK(f == flip.flips({.seed = 3, .epoch = 2, .index = index}));
    flipped += f;
    same_as_next_epoch += f == flip.flips({.seed = 3, .epoch = 3, .index = index});
  }
  CHECK(flipped > 1800);
  CHECK(flipped < 2200);
  CHECK(same_as_next_epoch > 1800);  // epochs draw independently
  CHECK(same_as_next_epoch < 2200);
  CHECK_FALSE(data::RandomHorizontalFlip(0.0).flips({.index = 1}));
  CHECK(data::RandomHorizontalFlip(1.0).flips({.index = 1}));
  Image image(1, 3);
  image.pixels = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  CHECK(data::horizontal_flip(image).pixels == std::vector<uint8_t>{7, 8, 9, 4, 5, 6, 1, 2, 3});
  CHECK_THROWS_AS(data::RandomHorizontalFlip(1.5), ts::ValueError);
}

TEST_CASE("the encoders write files that decode back: PNG exactly, JPEG closely" * doctest::skip(!kCodecs)) {
  data_test::TempDir dir;
  Image image(23, 31);
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = static_cast<uint8_t>((i * 37) % 251);
  data::write_png(dir / "a.png", image);
  CHECK(data::read_image(dir / "a.png") == image);
  Image grey(9, 4, 1);
  for (size_t i = 0; i < grey.pixels.size(); ++i) grey.pixels[i] = static_cast<uint8_t>(i * 5);
  data::write_png(dir / "g.png", grey);
  Image back = data::read_image(dir / "g.png");
  CHECK(back.channels == 3);
  CHECK(back.at(2, 3, 0) == grey.at(2, 3));
  CHECK(back.at(2, 3, 2) == grey.at(2, 3));

  Image smooth(32, 48);
  for (int64_t y = 0; y < 32; ++y) {
    for (int64_t x = 0; x < 48; ++x) {
      for (int64_t c = 0; c < 3; ++c) smooth.at(y, x, c) = static_cast<uint8_t>(4 * x + 2 * y + 20 * c);
    }
  }
  data::write_jpeg(dir / "s.jpg", smooth, 95);
  Image decoded = data::read_image(dir / "s.jpg");
  REQUIRE(decoded.height == 32);
  REQUIRE(decoded.width == 48);
  double error = 0;
  for (size_t i = 0; i < smooth.pixels.size(); ++i) error += std::abs(decoded.pixels[i] - smooth.pixels[i]);
  CHECK(error / static_cast<double>(smooth.pixels.size()) < 4.0);  // quality 95, chroma subsampled: ~2.4
  CHECK_THROWS_AS(data::encode_jpeg(smooth, 0), ts::ValueError);
  CHECK_THROWS_AS(data::encode_png(Image()), ts::ValueError);
}

TEST_CASE("a corrupt, truncated, empty or foreign file is a DataError naming it" * doctest::skip(!kCodecs)) {
  data_test::TempDir dir;
  const std::vector<uint8_t> png = file_bytes(images_dir() / "rgb.png");
  const std::vector<uint8_t> jpeg = file_bytes(images_dir() / "photo.jpg");
  auto write = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    data_test::write_raw(dir / name, bytes);
    return dir / name;
  };
  auto truncated_png = write("truncated.png", std::vector<uint8_t>(png.begin(), png.begin() + png.size() / 2));
  std::string message = error_of([&] { data::read_image(truncated_png); });
  CHECK(message.find(truncated_png.string()) != std::string::npos);
  CHECK(message.find("PNG") != std::string::npos);
  CHECK(message.find("truncated") != std::string::npos);

  std::vector<uint8_t> flipped_bits = png;
  for (size_t i = 60; i < 90; ++i) flipped_bits[i] ^= 0x5A;  // inside the first chunks: a CRC error
  auto corrupt_png = write("corrupt.png", flipped_bits);
  message = error_of([&] { data::read_image(corrupt_png); });
  CHECK(message.find("cannot decode PNG image '" + corrupt_png.string() + "'") != std::string::npos);

  auto truncated_jpeg = write("truncated.jpg", std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + jpeg.size() / 2));
  message = error_of([&] { data::read_image(truncated_jpeg); });
  CHECK(message.find("cannot decode JPEG image '" + truncated_jpeg.string() + "'") != std::string::npos);
  CHECK(message.find("truncated") != std::string::npos);

  auto header_only_jpeg = write("header.jpg", std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + 40));
  message = error_of([&] { data::read_image(header_only_jpeg); });
  CHECK(message.find(header_only_jpeg.string()) != std::string::npos);

  auto text = write("notes.png", {'h', 'e', 'l', 'l', 'o'});
  message = error_of([&] { data::read_image(text); });
  CHECK(message.find("'" + text.string() + "': it is neither a PNG nor a JPEG") != std::string::npos);
  auto empty = write("empty.jpg", {});
  CHECK(error_of([&] { data::read_image(empty); }).find("the file is empty") != std::string::npos);
  CHECK(error_of([&] { data::read_image(dir / "missing.png"); }).find("cannot open image") != std::string::npos);
  CHECK_THROWS_AS(data::read_image(text), data::DataError);
  // A FIFO is refused at once (no writer would ever come); a write goes through the shared writer.
  REQUIRE(::mkfifo((dir / "pipe.png").c_str(), 0644) == 0);
  CHECK(error_of([&] { data::read_image(dir / "pipe.png"); }).find("it is a FIFO (named pipe), not a regular file") !=
        std::string::npos);
  std::filesystem::create_directory(dir / "folder.png");
  CHECK(error_of([&] { data::write_png(dir / "folder.png", data::read_image(write("ok.png", png))); })
            .find("it is a directory") != std::string::npos);
}
