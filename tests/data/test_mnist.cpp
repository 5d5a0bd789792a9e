// MNIST / Fashion-MNIST: a small fake dataset in MNIST's layout (generated here), the checks
// on shapes, counts and labels, batches bit-identical to torchvision, and, when present,
// the real files.
//
// The real-data cases pass with a message when the files are absent (doctest has no skip):
// MNIST is looked for in $TESSERA_MNIST_DIR, else <source>/data/mnist (scripts/get-mnist
// puts it there); Fashion-MNIST in Debian's /usr/share/datasets/fashion-mnist
// (scripts/get-fashion-mnist installs it).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <tessera/tessera.h>

#include "data_test_support.h"
#include "test_support.h"

namespace ts = tessera;
using data_test::Bytes;
using data_test::TempDir;
using ts::DType;
using ts::Shape;
using ts::data::Split;

using test_support::contains;
using test_support::error_of;

namespace {

uint8_t fake_pixel(int64_t sample, int64_t pixel) { return static_cast<uint8_t>(sample * 31 + pixel * 7); }

struct FakeSplit {
  std::string prefix = "train";
  int64_t samples = 7;
  bool gzip_images = false;
  bool gzip_labels = true;
  std::function<uint8_t(int64_t)> label = [](int64_t i) { return static_cast<uint8_t>((i * 3) % 10); };
  std::vector<uint32_t> image_sizes = {};  // empty: {samples, 28, 28}
};

void write_fake(const std::filesystem::path& root, const FakeSplit& split) {
  std::vector<uint32_t> sizes = split.image_sizes;
  if (sizes.empty()) sizes = {static_cast<uint32_t>(split.samples), 28, 28};
  int64_t count = 1;
  for (uint32_t s : sizes) count *= s;
  Bytes images = data_test::idx_header(0x08, sizes);
  const int64_t per_sample = sizes[0] == 0 ? 0 : count / sizes[0];
  for (int64_t i = 0; i < count; ++i) images.push_back(fake_pixel(i / per_sample, i % per_sample));
  Bytes labels = data_test::idx_header(0x08, {static_cast<uint32_t>(split.samples)});
  for (int64_t i = 0; i < split.samples; ++i) labels.push_back(split.label(i));
  const std::string images_name = split.prefix + "-images-idx3-ubyte", labels_name = split.prefix + "-labels-idx1-ubyte";
  split.gzip_images ? data_test::write_gzip(root / (images_name + ".gz"), images) : data_test::write_raw(root / images_name, images);
  split.gzip_labels ? data_test::write_gzip(root / (labels_name + ".gz"), labels) : data_test::write_raw(root / labels_name, labels);
}

}  // namespace

TEST_CASE("MNIST loads a fake dataset in MNIST's layout, raw and gzip mixed") {
  TempDir dir;
  write_fake(dir.path(), {.prefix = "train", .samples = 7, .gzip_images = false, .gzip_labels = true});
  write_fake(dir.path(), {.prefix = "t10k", .samples = 3, .gzip_images = true, .gzip_labels = false});

  ts::data::MNIST train(dir.path(), Split::train);
  CHECK(train.size() == 7);
  CHECK(train.images().dtype() == DType::u8);
  CHECK(train.images().sizes() == Shape{7, 28, 28});
  CHECK(train.labels().dtype() == DType::u8);
  CHECK(train.targets().dtype() == DType::i64);
  CHECK(train.targets().to_vector<int64_t>() == std::vector<int64_t>{0, 3, 6, 9, 2, 5, 8});
  CHECK(train.images_file() == dir / "train-images-idx3-ubyte");
  CHECK(train.labels_file() == dir / "train-labels-idx1-ubyte.gz");
  CHECK(train.images().at<uint8_t>({4, 2, 3}) == fake_pixel(4, 2 * 28 + 3));

  ts::data::MNIST test(dir.path(), Split::test);
  CHECK(test.size() == 3);
  CHECK(test.images_file() == dir / "t10k-images-idx3-ubyte.gz");

  // get_batch: [B, 1, 28, 28] float of ToTensor, in index order, int64 targets.
  ts::data::Batch batch = train.get_batch({5, 0, 5});
  CHECK(batch.data.sizes() == Shape{3, 1, 28, 28});
  CHECK(batch.data.dtype() == DType::f32);
  CHECK(batch.target.to_vector<int64_t>() == std::vector<int64_t>{5, 0, 5});
  CHECK(batch.rows() == 3);
  std::vector<float> pixels = batch.data.to_vector<float>();
  for (int64_t p = 0; p < 784; ++p) {
    CHECK(pixels[static_cast<size_t>(p)] == ts::data::to_unit_float(fake_pixel(5, p)));
    CHECK(pixels[static_cast<size_t>(784 + p)] == ts::data::to_unit_float(fake_pixel(0, p)));
  }
  // An empty batch has 0 rows and the same trailing shape.
  ts::data::Batch none = train.get_batch({});
  CHECK(none.data.sizes() == Shape{0, 1, 28, 28});
  CHECK(none.target.sizes() == Shape{0});
  CHECK(none.rows() == 0);
  CHECK_THROWS_AS(train.get_batch({7}), ts::IndexError);
  CHECK_THROWS_AS(train.get_batch({-1}), ts::IndexError);
}

TEST_CASE("MNIST batches with Normalize are bit-identical to torchvision's") {
  TempDir dir;
  // 4 images of 784 pixels cover every byte value (fake_pixel steps by 7, coprime to 256).
  write_fake(dir.path(), {.prefix = "train", .samples = 4});
  const auto reference = data_test::load_transforms_reference();
  for (const char* name : {"mnist", "fashion_mnist"}) {
    CAPTURE(name);
    const auto& expected = reference.at(name);
    ts::data::MNIST train(dir.path(), Split::train, ts::data::Normalize(expected.mean, expected.std));
    ts::data::Batch batch = train.get_batch({0, 1, 2, 3});
    std::vector<float> values = batch.data.to_vector<float>();
    for (int64_t i = 0; i < 4 * 784; ++i) {
      uint8_t byte = fake_pixel(i / 784, i % 784);
      CHECK(std::bit_cast<uint32_t>(values[static_cast<size_t>(i)]) == expected.bits[byte]);
    }
  }
}

TEST_CASE("MNIST errors name the files") {
  TempDir dir;
  SUBCASE("missing files list what was looked for") {
    std::string message = error_of<ts::data::DataError>([&] { ts::data::MNIST(dir.path(), Split::train); });
    CHECK(contains(message, "MNIST train: no images file in '" + dir.path().string() + "'"));
    CHECK(contains(message, "looked for '" + (dir / "train-images-idx3-ubyte").string() + "' and '" +
                                (dir / "train-images-idx3-ubyte.gz").string() + "'"));
    CHECK(contains(message, "scripts/get-mnist"));
    write_fake(dir.path(), {.prefix = "train"});
    message = error_of<ts::data::DataError>([&] { ts::data::MNIST(dir.path(), Split::test); });
    CHECK(contains(message, "MNIST test: no images file"));
    CHECK(contains(message, "t10k-images-idx3-ubyte.gz"));
    message = error_of<ts::data::DataError>([&] { ts::data::FashionMNIST(dir.path(), Split::test); });
    CHECK(contains(message, "Fashion-MNIST test: no images file"));
    CHECK(contains(message, "scripts/get-fashion-mnist"));
  }
  SUBCASE("label out of range") {
    write_fake(dir.path(), {.label = [](int64_t i) { return static_cast<uint8_t>(i == 4 ? 10 : 1); }});
    std::string message = error_of<ts::data::DataError>([&] { ts::data::MNIST(dir.path(), Split::train); });
    CHECK(message == "MNIST train labels file '" + (dir / "train-labels-idx1-ubyte.gz").string() +
                         "': label 4 (byte offset 12 of the uncompressed IDX content) is 10, expected 0..9");
  }
  SUBCASE("counts differ") {
    write_fake(dir.path(), {.samples = 5, .image_sizes = {6, 28, 28}});
    std::string message = error_of<ts::data::DataError>([&] { ts::data::MNIST(dir.path(), Split::train); });
    CHECK(contains(message, "train-labels-idx1-ubyte.gz' has 5 labels but MNIST train images file '"));
    CHECK(contains(message, "train-images-idx3-ubyte' has 6 images"));
  }
  SUBCASE("images of the wrong shape") {
    write_fake(dir.path(), {.samples = 2, .image_sizes = {2, 28, 27}});
    std::string message = error_of<ts::data::DataError>([&] { ts::data::MNIST(dir.path(), Split::train); });
    CHECK(contains(message, "train-images-idx3-ubyte': expected uint8 images [N, 28, 28], found 0x08 (uint8) [2, 28, 27]"));
  }
  SUBCASE("images of the wrong type") {
    write_fake(dir.path(), {.samples = 1});
    data_test::write_raw(dir / "train-images-idx3-ubyte",
                         data_test::concat(data_test::idx_header(0x0D, {1, 28, 28}), Bytes(784 * 4, 0)));
    std::string message = error_of<ts::data::DataError>([&] { ts::data::MNIST(dir.path(), Split::train); });
    CHECK(contains(message, "expected uint8 images [N, 28, 28], found 0x0D (float32) [1, 28, 28]"));
  }
  SUBCASE("labels of two dimensions") {
    write_fake(dir.path(), {.samples = 2});
    data_test::write_gzip(dir / "train-labels-idx1-ubyte.gz",
                          data_test::concat(data_test::idx_header(0x08, {2, 1}), Bytes{1, 2}));
    std::string message = error_of<ts::data::DataError>([&] { ts::data::MNIST(dir.path(), Split::train); });
    CHECK(contains(message, "train-labels-idx1-ubyte.gz': expected uint8 labels [N], found 0x08 (uint8) [2, 1]"));
  }
  SUBCASE("a damaged file is the IDX reader's error") {
    write_fake(dir.path(), {.samples = 2});
    Bytes images = data_test::read_bytes(dir / "train-images-idx3-ubyte");
    images.resize(images.size() - 1);
    data_test::write_raw(dir / "train-images-idx3-ubyte", images);
    std::string message = error_of<ts::data::DataError>([&] { ts::data::MNIST(dir.path(), Split::train); });
    CHECK(contains(message, "IDX file '" + (dir / "train-images-idx3-ubyte").string() + "': at byte offset 1583"));
  }
}

TEST_CASE("Fashion-MNIST reads the same layout") {
  TempDir dir;
  write_fake(dir.path(), {.prefix = "t10k", .samples = 2, .gzip_images = true, .gzip_labels = true});
  ts::data::FashionMNIST test(dir.path(), Split::test, ts::data::kFashionMnistNormalize);
  CHECK(test.size() == 2);
  CHECK(ts::data::kFashionMnistDefaultRoot == "/usr/share/datasets/fashion-mnist");
}

TEST_CASE("real MNIST, when fetched by scripts/get-mnist") {
  const char* env = std::getenv("TESSERA_MNIST_DIR");
  const std::filesystem::path root = env != nullptr ? std::filesystem::path(env) : data_test::source_dir() / "data/mnist";
  if (!std::filesystem::exists(root / "train-images-idx3-ubyte") &&
      !std::filesystem::exists(root / "train-images-idx3-ubyte.gz")) {
    MESSAGE("real MNIST not checked: no files in " << root.string() << " (run scripts/get-mnist)");
    return;
  }
  ts::data::MNIST train(root, Split::train), test(root, Split::test);
  CHECK(train.images().sizes() == Shape{60000, 28, 28});
  CHECK(test.images().sizes() == Shape{10000, 28, 28});
  CHECK(train.labels().narrow(0, 0, 10).to_vector<uint8_t>() == std::vector<uint8_t>{5, 0, 4, 1, 9, 2, 1, 3, 1, 4});
  CHECK(test.labels().narrow(0, 0, 10).to_vector<uint8_t>() == std::vector<uint8_t>{7, 2, 1, 0, 4, 1, 4, 9, 5, 9});
  // The training-set statistics behind Normalize(0.1307, 0.3081); 5e-5 is the rounding of
  // those constants to four digits.
  double sum = 0, sum_squares = 0;
  const uint8_t* pixels = train.images().data_ptr<uint8_t>();
  const int64_t count = train.images().numel();
  for (int64_t i = 0; i < count; ++i) {
    double x = pixels[i] / 255.0;
    sum += x;
    sum_squares += x * x;
  }
  const double mean = sum / count, std = std::sqrt(sum_squares / count - mean * mean);
  CHECK(std::abs(mean - 0.1307) < 5e-5);
  CHECK(std::abs(std - 0.3081) < 5e-5);
}

TEST_CASE("real Fashion-MNIST, when Debian's dataset-fashion-mnist is installed") {
  const std::filesystem::path root = ts::data::kFashionMnistDefaultRoot;
  if (!std::filesystem::exists(root / "train-images-idx3-ubyte.gz")) {
    MESSAGE("real Fashion-MNIST not checked: no files in " << root.string() << " (run scripts/get-fashion-mnist)");
    return;
  }
  ts::data::FashionMNIST train(Split::train), test(Split::test);
  CHECK(train.size() == 60000);
  CHECK(test.size() == 10000);
  CHECK(train.labels().narrow(0, 0, 10).to_vector<uint8_t>() == std::vector<uint8_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5});
  CHECK(test.labels().narrow(0, 0, 10).to_vector<uint8_t>() == std::vector<uint8_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7});
}

TEST_CASE("the header examples, run on a fake MNIST") {
  TempDir dir;
  write_fake(dir.path(), {.prefix = "train", .samples = 10});
  const std::filesystem::path root = dir.path();
  const int64_t rank = 1, world = 2;

  // idx.h
  ts::Tensor images = ts::data::read_idx(root / "train-images-idx3-ubyte");
  CHECK(images.sizes() == Shape{10, 28, 28});
  // transforms.h
  ts::Tensor x = ts::data::Normalize{0.1307, 0.3081}(ts::data::to_tensor(images.unsqueeze(1)));
  CHECK(x.sizes() == Shape{10, 1, 28, 28});
  // dataloader.h
  ts::data::MNIST train(root, ts::data::Split::train, ts::data::kMnistNormalize);
  ts::data::DataLoader loader(train, {.batch_size = 4, .shuffle = true, .seed = 1,
                                      .sampler = {.rank = rank, .world_size = world}});
  int64_t rows = 0;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (const ts::data::Batch& batch : loader.epoch(epoch)) {
      CHECK(batch.data.sizes() == Shape{batch.rows(), 1, 28, 28});
      // Rank 1's rows are normalized exactly like the whole-dataset transform above.
      std::vector<int64_t> indices = loader.batch_indices(epoch, batch.index);
      for (size_t r = 0; r < indices.size(); ++r) {
        CHECK(batch.data[static_cast<int64_t>(r)].to_vector<float>() == x[indices[r]].to_vector<float>());
      }
      rows += batch.rows();
    }
  }
  CHECK(rows == 2 * (2 + 2 + 1));  // rank 1's halves of the global batches of 4, 4 and 2, two epochs
}
