// ImageFolder: torchvision's datasets.ImageFolder. Each sub-folder of `root` is a class;
// classes are numbered in sorted name order, and samples are every file with an accepted
// extension below a class folder (recursively), in sorted (folder, name) order: the same
// samples, order and targets torchvision lists for the same tree.
//
//   ts::data::ImageFolder train("data/images/train", {
//       .transforms = {ts::data::Resize(72), ts::data::CenterCrop(64), ts::data::RandomHorizontalFlip()},
//       .normalize = ts::data::kImageNetNormalize, .seed = 1});
//   ts::data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .seed = 1, .sampler = sampler});
//   for (const ts::data::Batch& batch : loader.epoch(epoch)) ...   // data float32 [B, 3, 64, 64]
//
// get_batch decodes its images (PNG or JPEG, see image.h) on `decode_threads` threads;
// under a DataLoader with prefetch that happens off the training thread, while the
// previous batch trains. Each image is converted to RGB, transformed in order (random
// transforms keyed by (seed, epoch, sample index), see image_transforms.h), then turned
// into float32 CHW by ToTensor and Normalize (when given), bit-identical to torchvision
// with PIL. Every image of a batch must end up the same size (end the transforms with a
// fixed-size Resize or CenterCrop); a file that cannot be decoded is a DataError naming it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tessera/data/dataset.h"
#include "tessera/data/image.h"
#include "tessera/data/image_transforms.h"
#include "tessera/data/transforms.h"

namespace tessera::data {

struct ImageFolderOptions {
  // On each decoded RGB image, in order. They run on the decoding threads, several at once:
  // a transform must be safe to call concurrently (the ones in image_transforms.h are).
  std::vector<ImageTransform> transforms{};
  std::optional<Normalize> normalize;      // after ToTensor
  uint64_t seed = 0;                       // keys the random transforms
  int decode_threads = 2;                  // threads decoding one batch (1: the calling thread only)
  // Accepted file extensions, compared case-insensitively. torchvision also accepts .ppm,
  // .bmp, .pgm, .tif, .tiff and .webp, which Tessera cannot decode: such files are skipped
  // and counted (skipped_files()).
  std::vector<std::string> extensions = {".png", ".jpg", ".jpeg"};
};

class ImageFolder : public Dataset {
 public:
  struct Sample {
    std::filesystem::path path;
    int64_t target = 0;
  };

  // Lists the classes and samples (decodes nothing). DataError when `root` is not a folder,
  // has no class folder, or a class folder holds no accepted file.
  explicit ImageFolder(const std::filesystem::path& root, ImageFolderOptions options = {});

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  // Samples at `indices` as float32 [B, 3, H, W] and int64 targets [B]; random transforms
  // keyed with epoch 0 (the DataLoader calls get_batch_in_epoch).
  Batch get_batch(const std::vector<int64_t>& indices) const override { return get_batch_in_epoch(indices, 0); }
  Batch get_batch_in_epoch(const std::vector<int64_t>& indices, int64_t epoch) const override;

  // One sample decoded and transformed, before ToTensor.
  Image load(int64_t index, int64_t epoch = 0) const;

  const std::filesystem::path& root() const { return root_; }
  const std::vector<std::string>& classes() const { return classes_; }
  // torchvision's class_to_idx[name]; IndexError naming the class when unknown.
  int64_t class_index(const std::string& name) const;
  const std::vector<Sample>& samples() const { return samples_; }
  Tensor targets() const;  // int64 [N]
  // Files below the class folders with an image extension Tessera cannot decode.
  int64_t skipped_files() const { return skipped_files_; }
  const ImageFolderOptions& options() const { return options_; }

 private:
  std::filesystem::path root_;
  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::vector<Sample> samples_;
  int64_t skipped_files_ = 0;
};

}  // namespace tessera::data
