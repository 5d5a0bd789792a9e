// ImageFolder on small trees written here with libpng and libjpeg: classes and sample
// order as torchvision lists them, batches equal to decoding and transforming by hand,
// the DataLoader's prefetch and ranks, the flip's independence of threads and ranks,
// and the errors for corrupt files, empty classes and mismatched sizes.
#include <doctest/doctest.h>

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

// An image whose pixels encode (seed, y, x, c), so that any mix-up shows.
Image pattern(int64_t height, int64_t width, int seed) {
  Image image(height, width);
  for (int64_t y = 0; y < height; ++y) {
    for (int64_t x = 0; x < width; ++x) {
      for (int64_t c = 0; c < 3; ++c) image.at(y, x, c) = static_cast<uint8_t>((seed * 53 + y * 7 + x * 3 + c * 85) % 256);
    }
  }
  return image;
}

void touch(const std::filesystem::path& file) { data_test::write_raw(file, {'x'}); }

// The tree of test_image_folder's ordering case (the order torchvision 0.14 gives,
// checked with torchvision.datasets.folder.make_dataset).
void write_ordering_tree(const std::filesystem::path& root) {
  for (const char* folder : {"cat/b/sub", "cat/b-c", "cat/B", "dog", "zebra", "empty_looking"}) {
    std::filesystem::create_directories(root / folder);
  }
  int seed = 0;
  for (const char* png : {"cat/z.png", "cat/a.PNG", "cat/B/w.png", "cat/b/sub/v.png", "zebra/only.png", "empty_looking/q.png"}) {
    data::write_png(root / png, pattern(6, 5, seed++));
  }
  for (const char* jpeg : {"cat/b/x.jpg", "cat/b-c/y.jpeg", "dog/1.jpg", "dog/10.jpg", "dog/2.jpg"}) {
    data::write_jpeg(root / jpeg, pattern(6, 5, seed++));
  }
  touch(root / "cat/notes.txt");
  touch(root / "cat/m.bmp");
  touch(root / "stray.png");  // a file at the top is no class
}

// `count` PNGs per class of varied sizes, so that Resize and CenterCrop matter.
void write_png_tree(const std::filesystem::path& root, int classes, int count) {
  for (int k = 0; k < classes; ++k) {
    const std::filesystem::path folder = root / ("class" + std::to_string(k));
    std::filesystem::create_directories(folder);
    for (int i = 0; i < count; ++i) {
      data::write_png(folder / ("img" + std::to_string(i) + ".png"), pattern(10 + i % 3, 12 + (i + k) % 4, k * 100 + i));
    }
  }
}

std::string relative(const data::ImageFolder& folder, int64_t index) {
  return std::filesystem::relative(folder.samples()[static_cast<size_t>(index)].path, folder.root()).string();
}

}  // namespace

TEST_CASE("ImageFolder lists classes and samples in torchvision's order" * doctest::skip(!kCodecs)) {
  data_test::TempDir dir;
  write_ordering_tree(dir.path());
  data::ImageFolder folder(dir.path());
  CHECK(folder.classes() == std::vector<std::string>{"cat", "dog", "empty_looking", "zebra"});
  CHECK(folder.class_index("dog") == 1);
  CHECK_THROWS_AS(folder.class_index("cow"), ts::IndexError);
  const std::vector<std::string> expected = {"cat/a.PNG", "cat/z.png", "cat/B/w.png", "cat/b/x.jpg", "cat/b-c/y.jpeg",
                                             "cat/b/sub/v.png", "dog/1.jpg", "dog/10.jpg", "dog/2.jpg",
                                             "empty_looking/q.png", "zebra/only.png"};
  REQUIRE(folder.size() == static_cast<int64_t>(expected.size()));
  for (int64_t i = 0; i < folder.size(); ++i) CHECK(relative(folder, i) == expected[static_cast<size_t>(i)]);
  CHECK(folder.targets().to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 3});
  CHECK(folder.skipped_files() == 1);  // m.bmp: torchvision would load it, Tessera cannot decode it

  // Mixed PNG and JPEG decode through one batch; targets follow.
  data::Batch batch = folder.get_batch({10, 6, 0});
  CHECK(batch.data.sizes() == ts::Shape{3, 3, 6, 5});
  CHECK(batch.target.to_vector<int64_t>() == std::vector<int64_t>{3, 1, 0});
}

TEST_CASE("a batch is decoded, transformed, ToTensor'd and normalised as by hand" * doctest::skip(!kCodecs)) {
  data_test::TempDir dir;
  write_png_tree(dir.path(), 2, 5);
  const std::vector<data::ImageTransform> transforms = {data::Resize(9), data::CenterCrop(8, 7)};
  data::ImageFolder folder(dir.path(), {.transforms = transforms, .normalize = data::kImageNetNormalize, .decode_threads = 3});
  const std::vector<int64_t> indices = {7, 0, 4, 9, 2};
  data::Batch batch = folder.get_batch(indices);
  REQUIRE(batch.data.sizes() == ts::Shape{5, 3, 8, 7});
  for (size_t row = 0; row < indices.size(); ++row) {
    const auto& sample = folder.samples()[static_cast<size_t>(indices[row])];
    Image image = data::apply_transforms(transforms, data::read_image(sample.path), {});
    Tensor expected = data::kImageNetNormalize(data::to_tensor(image));
    CHECK(batch.data[static_cast<int64_t>(row)].contiguous().to_vector<float>() == expected.to_vector<float>());
    CHECK(batch.target.at<int64_t>({static_cast<int64_t>(row)}) == sample.target);
  }
  // One decoding thread gives the same batch.
  data::ImageFolder serial(dir.path(), {.transforms = transforms, .normalize = data::kImageNetNormalize, .decode_threads = 1});
  CHECK(serial.get_batch(indices).data.to_vector<float>() == batch.data.to_vector<float>());
  // An empty batch still has the image shape, so every rank's share of a batch agrees.
  CHECK(folder.get_batch({}).data.sizes() == ts::Shape{0, 3, 8, 7});
  CHECK_THROWS_AS(folder.get_batch({10}), ts::IndexError);
}

TEST_CASE("under a DataLoader, flips depend on (seed, epoch, sample), not on rank or thread" * doctest::skip(!kCodecs)) {
  data_test::TempDir dir;
  write_png_tree(dir.path(), 3, 4);
  data::ImageFolderOptions options;
  options.transforms = {data::CenterCrop(10, 12), data::RandomHorizontalFlip()};
  options.seed = 11;
  data::ImageFolder folder(dir.path(), options);
  const int64_t global_batch = 5;
  auto load_epoch = [&](int64_t epoch, int world_size, int threads) {
    data::ImageFolderOptions o = options;
    o.decode_threads = threads;
    auto dataset = std::make_shared<data::ImageFolder>(dir.path(), o);
    std::vector<std::vector<float>> batches;
    for (int rank = 0; rank < world_size; ++rank) {
      data::DataLoader loader(dataset, {.batch_size = global_batch, .shuffle = true, .seed = 4,
                                        .sampler = {.rank = rank, .world_size = world_size}});
      size_t b = 0;
      for (const data::Batch& batch : loader.epoch(epoch)) {
        if (batches.size() <= b) batches.emplace_back();
        std::vector<float> part = batch.data.to_vector<float>();
        batches[b].insert(batches[b].end(), part.begin(), part.end());  // ranks' rows in rank order
        ++b;
      }
    }
    return batches;
  };
  auto one_rank = load_epoch(1, 1, 1);
  CHECK(one_rank.size() == 3);  // 12 samples in global batches of 5
  CHECK(load_epoch(1, 2, 2) == one_rank);
  CHECK(load_epoch(1, 3, 4) == one_rank);
  CHECK(load_epoch(2, 1, 1) != one_rank);  // another epoch: another order and other flips

  // The flip of one sample, seen directly: load() keys it the same way.
  data::RandomHorizontalFlip flip;
  int flipped = 0;
  for (int64_t i = 0; i < folder.size(); ++i) {
    Image unflipped = data::CenterCrop(10, 12)(data::read_image(folder.samples()[static_cast<size_t>(i)].path));
    const bool expected = flip.flips({.seed = 11, .epoch = 3, .index = i});
    CHECK(folder.load(i, 3) == (expected ? data::horizontal_flip(unflipped) : unflipped));
    flipped += expected;
  }
  CHECK(flipped > 0);
  CHECK(flipped < folder.size());
}

TEST_CASE("ImageFolder errors name the folder or the file" * doctest::skip(!kCodecs)) {
  data_test::TempDir dir;
  CHECK(error_of([&] { data::ImageFolder folder(dir / "absent"); }).find("is not a folder") != std::string::npos);
  CHECK(error_of([&] { data::ImageFolder folder(dir.path()); }).find("found no class folder in '" + dir.path().string())
        != std::string::npos);
  std::filesystem::create_directories(dir / "a");
  std::filesystem::create_directories(dir / "b");
  data::write_png(dir / "a/1.png", pattern(4, 4, 1));
  touch(dir / "b/readme.txt");
  CHECK(error_of([&] { data::ImageFolder folder(dir.path()); }).find("found no valid file for the classes b") !=
        std::string::npos);

  // A corrupt file fails its batch, under the DataLoader's worker too, naming the file.
  data::write_png(dir / "b/2.png", pattern(4, 4, 2));
  std::vector<uint8_t> bytes = data::encode_png(pattern(4, 4, 3));
  bytes.resize(bytes.size() - 30);
  data_test::write_raw(dir / "b/3.png", bytes);
  data::ImageFolder folder(dir.path());
  data::DataLoader loader(folder, {.batch_size = 3});
  std::string message = error_of([&] {
    for (const data::Batch& batch : loader.epoch(0)) (void)batch;
  });
  CHECK(message.find("cannot decode PNG image '" + (dir / "b/3.png").string() + "'") != std::string::npos);
  CHECK_THROWS_AS(folder.get_batch({2}), data::DataError);
  CHECK(folder.get_batch({0, 1}).rows() == 2);

  // Images of different sizes cannot share a batch without a fixed-size transform.
  data::write_png(dir / "a/4.png", pattern(5, 4, 4));
  data::ImageFolder mixed(dir.path());
  message = error_of([&] { mixed.get_batch({0, 1}); });
  CHECK(message.find("differ in size after the transforms") != std::string::npos);
  CHECK(message.find((dir / "a/4.png").string() + "' is 5x4") != std::string::npos);
  data::ImageFolderOptions resized;
  resized.transforms = {data::Resize(4, 4)};
  CHECK(data::ImageFolder(dir.path(), resized).get_batch({0, 1}).data.sizes() == ts::Shape{2, 3, 4, 4});
  data::ImageFolderOptions no_threads;
  no_threads.decode_threads = 0;
  CHECK_THROWS_AS(data::ImageFolder(dir.path(), no_threads), ts::ValueError);
}
