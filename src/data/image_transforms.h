// Transforms on decoded 8-bit images, computed as torchvision computes them on PIL images,
// so that an ImageFolder batch equals the one a PyTorch script builds with
// Compose([Resize(...), CenterCrop(...), RandomHorizontalFlip(), ToTensor(), Normalize(...)]):
//
//   Resize        PIL's Image.resize(size, BILINEAR), bit for bit: a triangle filter whose
//                 support widens with the downscale factor (PIL always antialiases),
//                 coefficients in 22-bit fixed point, a horizontal then a vertical pass with
//                 the intermediate rounded to 8 bits. Resize(s) maps the shorter side to s and
//                 the longer to int(s * long / short), as torchvision does.
//   CenterCrop    torchvision's offsets (round half to even of (size - crop) / 2) and its zero
//                 padding when the crop is larger than the image.
//   RandomHorizontalFlip(p)  flips when a uniform draw is below p, the draw keyed by
//                 (seed, epoch, sample index) with Philox, so it is reproducible and the same
//                 whichever thread, worker or rank decodes the sample (torchvision instead draws
//                 from the worker's global generator).
//
//   std::vector<ts::data::ImageTransform> train = {ts::data::Resize(72), ts::data::CenterCrop(64),
//                                                  ts::data::RandomHorizontalFlip()};
//   ts::data::Image out = ts::data::apply_transforms(train, image, {.seed = 1, .epoch = 3, .index = 17});
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tessera/data/image.h"
#include "tessera/data/transforms.h"

namespace tessera::data {

// What keys a transform's random draws: the dataset seed, the epoch and the sample's index.
struct SampleKey {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t index = 0;
};

// A transform of one image: the three below, or any callable of this shape.
using ImageTransform = std::function<Image(const Image& image, const SampleKey& key)>;

// Applies `transforms` in order.
Image apply_transforms(const std::vector<ImageTransform>& transforms, Image image, const SampleKey& key);

// PIL's Image.resize((width, height), Image.BILINEAR) on an 8-bit image (see above).
Image resize_bilinear(const Image& image, int64_t height, int64_t width);

class Resize {
 public:
  explicit Resize(int64_t size);             // shorter side to `size`, aspect ratio kept
  Resize(int64_t height, int64_t width);     // exactly height x width
  Image operator()(const Image& image, const SampleKey& key = {}) const;
  // The output size for an input of height x width: {height, width}.
  std::pair<int64_t, int64_t> output_size(int64_t height, int64_t width) const;

 private:
  int64_t size_ = 0, height_ = 0, width_ = 0;  // size_ > 0: shorter-side mode
};

class CenterCrop {
 public:
  explicit CenterCrop(int64_t size) : CenterCrop(size, size) {}
  CenterCrop(int64_t height, int64_t width);
  Image operator()(const Image& image, const SampleKey& key = {}) const;

 private:
  int64_t height_, width_;
};

class RandomHorizontalFlip {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  Image operator()(const Image& image, const SampleKey& key) const;
  // Whether the sample `key` names is flipped: philox::unit_float of word 0 of
  // philox::block(key.seed ^ stream_of("RandomHorizontalFlip"), key.epoch, key.index) < p.
  bool flips(const SampleKey& key) const;

 private:
  double p_;
};

// Mirrors an image left to right.
Image horizontal_flip(const Image& image);

// The ImageNet statistics torchvision's pretrained models expect.
inline const Normalize kImageNetNormalize{{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}};

}  // namespace tessera::data
