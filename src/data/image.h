// 8-bit images as decoded from PNG and JPEG files, in PIL's layout: height x width x
// channels, row-major, channels interleaved (HWC). ImageFolder works on RGB images, as
// torchvision's loader converts every image with Image.convert("RGB").
//
//   ts::data::Image image = ts::data::read_image("cat.jpg");      // RGB, whatever the file's mode
//   ts::Tensor x = ts::data::to_tensor(image);                       // float32 [3, H, W], byte / 255
//   ts::data::write_png("copy.png", image);
//
// Decoding (PNG with libpng, JPEG with libjpeg-turbo, chosen by the file's signature, not
// its name) gives what PIL gives after convert("RGB"): palettes expanded, grey replicated
// to three channels, alpha dropped (not composited), 16-bit samples cut to their high
// byte; JPEGs with libjpeg's default (ISLOW, fancy upsampling) decoder, as PIL uses it.
// (One difference: PIL clips 16-bit grey PNGs at 255 where this keeps the high byte.)
// A file that cannot be decoded, truncated image data included, is a DataError naming the
// file and the decoder's reason. Without libpng or libjpeg at build time, decoding that
// format is a NotCompiledError naming the Debian package to install.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "tessera/data/error.h"
#include "tessera/tensor/tensor.h"

namespace tessera::data {

struct Image {
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 3;  // 3 (RGB) or 1 (grey)
  std::vector<uint8_t> pixels;  // height * width * channels bytes, HWC

  Image() = default;
  Image(int64_t height, int64_t width, int64_t channels = 3);  // zero-filled
  uint8_t& at(int64_t y, int64_t x, int64_t c = 0) { return pixels[static_cast<size_t>((y * width + x) * channels + c)]; }
  uint8_t at(int64_t y, int64_t x, int64_t c = 0) const {
    return pixels[static_cast<size_t>((y * width + x) * channels + c)];
  }
  bool operator==(const Image&) const = default;
};

// Larger images are refused before any allocation (PIL refuses twice its 89M-pixel limit).
inline constexpr int64_t kMaxImagePixels = 178'956'970;

enum class ImageFormat { unknown, png, jpeg };
// The format the first bytes announce (PNG: 89 50 4E 47 0D 0A 1A 0A; JPEG: FF D8 FF).
ImageFormat detect_image_format(std::span<const uint8_t> bytes);

// Decodes a PNG or JPEG held in memory to RGB; `name` (a file name) goes into errors.
Image decode_image(std::span<const uint8_t> bytes, const std::string& name);
Image decode_png(std::span<const uint8_t> bytes, const std::string& name);
Image decode_jpeg(std::span<const uint8_t> bytes, const std::string& name);
// Reads and decodes a regular file (see above): the RGB image. A FIFO or a device is
// refused (a DataError naming it), never waited on.
Image read_image(const std::filesystem::path& file);

// Writes a grey or RGB image as an 8-bit PNG, or as a baseline JPEG of `quality` (1..100),
// replacing `file` atomically (io::AtomicFile: a device or FIFO is written through, a
// directory refused). io::IOError naming the file on failure.
void write_png(const std::filesystem::path& file, const Image& image);
void write_jpeg(const std::filesystem::path& file, const Image& image, int quality = 90);
std::vector<uint8_t> encode_png(const Image& image);
std::vector<uint8_t> encode_jpeg(const Image& image, int quality = 90);

// ToTensor on a PIL image: float32 [C, H, W] with each byte / 255 (HWC to CHW).
Tensor to_tensor(const Image& image);

// Whether this build decodes the format (it was built with libpng / libjpeg).
bool png_supported();
bool jpeg_supported();

}  // namespace tessera::data
