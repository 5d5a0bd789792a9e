// Resize (a port of PIL's Resample.c bilinear path for 8-bit images), CenterCrop and
// RandomHorizontalFlip. The resampling keeps PIL's arithmetic exactly: double-precision
// filter weights normalised per output pixel, converted to int32 fixed point with 22
// fractional bits (rounded half away from zero), accumulated in int32 from 1 << 21, then
// shifted and clipped to 0..255 after each pass.
#include "tessera/data/image_transforms.h"

#include <cmath>

#include "tessera/tensor/philox.h"

namespace tessera::data {

Image apply_transforms(const std::vector<ImageTransform>& transforms, Image image, const SampleKey& key) {
  for (const ImageTransform& transform : transforms) image = transform(image, key);
  return image;
}

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

// For each output pixel of one axis: the first input pixel, the number of taps, and the
// fixed-point weights (ksize per pixel, unused ones zero), as PIL's precompute_coeffs.
struct AxisCoefficients {
  int64_t ksize = 0;
  std::vector<int32_t> first, count;
  std::vector<int32_t> weights;
};

double bilinear_filter(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

AxisCoefficients precompute(int64_t in_size, int64_t out_size) {
  constexpr double filter_support = 1.0;
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = filter_support * filterscale;
  AxisCoefficients axis;
  axis.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  axis.first.resize(static_cast<size_t>(out_size));
  axis.count.resize(static_cast<size_t>(out_size));
  axis.weights.assign(static_cast<size_t>(out_size * axis.ksize), 0);
  std::vector<double> k(static_cast<size_t>(axis.ksize));
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = (static_cast<double>(xx) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);  // truncation, as PIL's (int) cast
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = static_cast<int>(in_size);
    xmax -= xmin;
    double total = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = bilinear_filter((x + xmin - center + 0.5) * ss);
      k[static_cast<size_t>(x)] = w;
      total += w;
    }
    int32_t* out = &axis.weights[static_cast<size_t>(xx * axis.ksize)];
    for (int x = 0; x < xmax; ++x) {
      double w = k[static_cast<size_t>(x)];
      if (total != 0.0) w /= total;
      out[x] = w < 0 ? static_cast<int32_t>(-0.5 + w * (1 << kPrecisionBits))
                     : static_cast<int32_t>(0.5 + w * (1 << kPrecisionBits));
    }
    axis.first[static_cast<size_t>(xx)] = xmin;
    axis.count[static_cast<size_t>(xx)] = xmax;
  }
  return axis;
}

uint8_t clip8(int32_t value) {
  if (value >= (1 << kPrecisionBits << 8)) return 255;
  if (value <= 0) return 0;
  return static_cast<uint8_t>(value >> kPrecisionBits);
}

Image resample_horizontal(const Image& in, int64_t out_width) {
  const AxisCoefficients axis = precompute(in.width, out_width);
  Image out(in.height, out_width, in.channels);
  for (int64_t y = 0; y < in.height; ++y) {
    for (int64_t xx = 0; xx < out_width; ++xx) {
      const int32_t* k = &axis.weights[static_cast<size_t>(xx * axis.ksize)];
      const int32_t first = axis.first[static_cast<size_t>(xx)], count = axis.count[static_cast<size_t>(xx)];
      for (int64_t c = 0; c < in.channels; ++c) {
        int32_t sum = 1 << (kPrecisionBits - 1);
        for (int32_t x = 0; x < count; ++x) sum += static_cast<int32_t>(in.at(y, first + x, c)) * k[x];
        out.at(y, xx, c) = clip8(sum);
      }
    }
  }
  return out;
}

Image resample_vertical(const Image& in, int64_t out_height) {
  const AxisCoefficients axis = precompute(in.height, out_height);
  Image out(out_height, in.width, in.channels);
  for (int64_t yy = 0; yy < out_height; ++yy) {
    const int32_t* k = &axis.weights[static_cast<size_t>(yy * axis.ksize)];
    const int32_t first = axis.first[static_cast<size_t>(yy)], count = axis.count[static_cast<size_t>(yy)];
    for (int64_t x = 0; x < in.width; ++x) {
      for (int64_t c = 0; c < in.channels; ++c) {
        int32_t sum = 1 << (kPrecisionBits - 1);
        for (int32_t y = 0; y < count; ++y) sum += static_cast<int32_t>(in.at(first + y, x, c)) * k[y];
        out.at(yy, x, c) = clip8(sum);
      }
    }
  }
  return out;
}

}  // namespace

Image resize_bilinear(const Image& image, int64_t height, int64_t width) {
  TS_CHECK(height > 0 && width > 0, ValueError, "Resize: the output size must be positive, got ", height, "x", width);
  TS_CHECK(image.height > 0 && image.width > 0, ValueError, "Resize: the image is empty (", image.height, "x",
           image.width, ")");
  TS_CHECK(height * width <= kMaxImagePixels, ValueError, "Resize: ", height, "x", width, " is more than ",
           kMaxImagePixels, " pixels");
  // As PIL: a pass runs only for an axis whose size changes; the horizontal one first.
  Image out = width != image.width ? resample_horizontal(image, width) : image;
  if (height != image.height) out = resample_vertical(out, height);
  return out;
}

Resize::Resize(int64_t size) : size_(size) {
  TS_CHECK(size > 0, ValueError, "Resize: size must be positive, got ", size);
}

Resize::Resize(int64_t height, int64_t width) : height_(height), width_(width) {
  TS_CHECK(height > 0 && width > 0, ValueError, "Resize: size must be positive, got ", height, "x", width);
}

std::pair<int64_t, int64_t> Resize::output_size(int64_t height, int64_t width) const {
  if (size_ == 0) return {height_, width_};
  // torchvision: new_short = size, new_long = int(size * long / short) (a float division).
  const int64_t shorter = std::min(height, width), longer = std::max(height, width);
  const auto scaled = static_cast<int64_t>(static_cast<double>(size_ * longer) / static_cast<double>(shorter));
  return height <= width ? std::pair{size_, scaled} : std::pair{scaled, size_};
}

Image Resize::operator()(const Image& image, const SampleKey&) const {
  auto [height, width] = output_size(image.height, image.width);
  if (height == image.height && width == image.width) return image;
  return resize_bilinear(image, height, width);
}

CenterCrop::CenterCrop(int64_t height, int64_t width) : height_(height), width_(width) {
  TS_CHECK(height > 0 && width > 0, ValueError, "CenterCrop: size must be positive, got ", height, "x", width);
}

Image CenterCrop::operator()(const Image& image, const SampleKey&) const {
  // Too small an image is first padded with zeros, left/top getting the smaller half.
  const int64_t pad_top = height_ > image.height ? (height_ - image.height) / 2 : 0;
  const int64_t pad_left = width_ > image.width ? (width_ - image.width) / 2 : 0;
  const int64_t padded_height = std::max(height_, image.height), padded_width = std::max(width_, image.width);
  // torchvision: int(round((size - crop) / 2.0)), Python's round halving to even.
  const auto offset = [](int64_t extra) { return static_cast<int64_t>(std::nearbyint(static_cast<double>(extra) / 2.0)); };
  const int64_t top = offset(padded_height - height_) - pad_top, left = offset(padded_width - width_) - pad_left;
  Image out(height_, width_, image.channels);
  for (int64_t y = 0; y < height_; ++y) {
    const int64_t sy = y + top;
    if (sy < 0 || sy >= image.height) continue;
    for (int64_t x = 0; x < width_; ++x) {
      const int64_t sx = x + left;
      if (sx < 0 || sx >= image.width) continue;
      for (int64_t c = 0; c < image.channels; ++c) out.at(y, x, c) = image.at(sy, sx, c);
    }
  }
  return out;
}

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  TS_CHECK(p >= 0 && p <= 1, ValueError, "RandomHorizontalFlip: p must be in [0, 1], got ", p);
}

bool RandomHorizontalFlip::flips(const SampleKey& key) const {
  constexpr uint64_t purpose = philox::stream_of("RandomHorizontalFlip");
  const philox::Counter bits = philox::block(key.seed ^ purpose, static_cast<uint64_t>(key.epoch),
                                             static_cast<uint64_t>(key.index));
  return philox::unit_float(bits.word[0]) < p_;
}

Image RandomHorizontalFlip::operator()(const Image& image, const SampleKey& key) const {
  return flips(key) ? horizontal_flip(image) : image;
}

Image horizontal_flip(const Image& image) {
  Image out(image.height, image.width, image.channels);
  for (int64_t y = 0; y < image.height; ++y) {
    for (int64_t x = 0; x < image.width; ++x) {
      for (int64_t c = 0; c < image.channels; ++c) out.at(y, image.width - 1 - x, c) = image.at(y, x, c);
    }
  }
  return out;
}

}  // namespace tessera::data
