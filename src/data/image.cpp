// Image: construction, format detection, file reading and writing, ToTensor.
#include "tessera/data/image.h"

#include <algorithm>
#include <iterator>

#include "tessera/data/transforms.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/errors.h"
#include "tessera/io/posix_file.h"
#include "tessera/tensor/factory.h"

namespace tessera::data {

Image::Image(int64_t height_in, int64_t width_in, int64_t channels_in)
    : height(height_in), width(width_in), channels(channels_in) {
  TS_CHECK(height >= 0 && width >= 0 && (channels == 1 || channels == 3), ValueError,
           "Image: expected a non-negative size and 1 or 3 channels, got ", height, "x", width, "x", channels);
  TS_CHECK(height * width <= kMaxImagePixels, DataError, "Image: ", height, "x", width, " is more than ",
           kMaxImagePixels, " pixels");
  pixels.assign(static_cast<size_t>(height * width * channels), 0);
}

ImageFormat detect_image_format(std::span<const uint8_t> bytes) {
  static constexpr uint8_t png_signature[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (bytes.size() >= 8 && std::equal(png_signature, png_signature + 8, bytes.begin())) return ImageFormat::png;
  if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) return ImageFormat::jpeg;
  return ImageFormat::unknown;
}

Image decode_image(std::span<const uint8_t> bytes, const std::string& name) {
  switch (detect_image_format(bytes)) {
    case ImageFormat::png: return decode_png(bytes, name);
    case ImageFormat::jpeg: return decode_jpeg(bytes, name);
    case ImageFormat::unknown: break;
  }
  throw DataError(detail::concat("cannot decode image '", name, "': ",
                                 bytes.empty() ? std::string("the file is empty")
                                               : std::string("it is neither a PNG nor a JPEG (unknown signature)")));
}

Image read_image(const std::filesystem::path& file) {
  std::string bytes;
  try {
    bytes = io::read_regular_file(file.string());  // a FIFO or a device is refused, not waited on
  } catch (const io::IOError& error) {
    throw DataError(detail::concat("cannot open image '", file.string(), "': ", error.what()));
  }
  return decode_image(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), file.string());
}

namespace {

// Through the shared writer: atomic for a regular file, straight through to a device or FIFO.
void write_bytes(const std::filesystem::path& file, const std::vector<uint8_t>& bytes) {
  io::AtomicFile out(file.string());
  out.write(bytes.data(), bytes.size());
  out.commit();
}

}  // namespace

void write_png(const std::filesystem::path& file, const Image& image) { write_bytes(file, encode_png(image)); }

void write_jpeg(const std::filesystem::path& file, const Image& image, int quality) {
  write_bytes(file, encode_jpeg(image, quality));
}

Tensor to_tensor(const Image& image) {
  const int64_t plane = image.height * image.width;
  Tensor out = empty({image.channels, image.height, image.width}, {.dtype = DType::f32});
  if (plane == 0) return out;
  float* data = out.data_ptr<float>();
  for (int64_t c = 0; c < image.channels; ++c) {
    for (int64_t i = 0; i < plane; ++i) data[c * plane + i] = to_unit_float(image.pixels[static_cast<size_t>(i * image.channels + c)]);
  }
  return out;
}

}  // namespace tessera::data
