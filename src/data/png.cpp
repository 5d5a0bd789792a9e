// PNG decoding and encoding with libpng's classic API.
//
// libpng reports errors by longjmp. The functions that call libpng keep no C++ object
// with a destructor in their own frame between setjmp and a possible longjmp (everything
// lives in a heap-allocated state reached through a pointer set before setjmp), and the
// error handler only copies the message into a fixed buffer, so no destructor is skipped
// and no exception crosses C code. Warnings are ignored, as PIL ignores them.
#include "tessera/config.h"
#include "tessera/data/image.h"

#if TESSERA_HAS_PNG
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>
#endif

namespace tessera::data {

#if TESSERA_HAS_PNG

bool png_supported() { return true; }

namespace {

struct PngState {
  std::span<const uint8_t> bytes;
  size_t offset = 0;
  char message[256] = "";
  Image image;
  std::vector<png_bytep> rows;
  std::vector<uint8_t> encoded;
};

void on_error(png_structp png, png_const_charp message) {
  auto* state = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(state->message, sizeof state->message, "%s", message != nullptr ? message : "unknown libpng error");
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

void read_from_memory(png_structp png, png_bytep out, png_size_t count) {
  auto* state = static_cast<PngState*>(png_get_io_ptr(png));
  if (state->bytes.size() - state->offset < count) png_error(png, "unexpected end of data: the file is truncated");
  std::memcpy(out, state->bytes.data() + state->offset, count);
  state->offset += count;
}

void write_to_memory(png_structp png, png_bytep data, png_size_t count) {
  auto* state = static_cast<PngState*>(png_get_io_ptr(png));
  state->encoded.insert(state->encoded.end(), data, data + count);
}

void flush_memory(png_structp) {}

// Fills state->image; false with state->message set when libpng fails. The vectors are
// sized between libpng calls, never inside them; a size over the limits is an error
// raised through png_error (so that libpng cleans up) before anything is allocated.
bool decode_into(PngState* state) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, state, on_error, on_warning);
  if (png == nullptr) {
    std::snprintf(state->message, sizeof state->message, "libpng could not start a decoder");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, state, read_from_memory);
  png_read_info(png, info);
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0;
  png_get_IHDR(png, info, &width, &height, &bit_depth, &color_type, nullptr, nullptr, nullptr);
  if (static_cast<uint64_t>(width) * height > static_cast<uint64_t>(kMaxImagePixels)) {
    png_error(png, "image is larger than the pixel limit");
  }
  // Everything to 8-bit RGB, as PIL's convert("RGB"): palettes and low-depth grey
  // expanded, transparency ignored, alpha stripped, 16 bits cut to the high byte.
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if ((color_type & PNG_COLOR_MASK_COLOR) == 0 && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (bit_depth == 16) png_set_strip_16(png);
  // A palette with a tRNS chunk expands to RGBA: strip that alpha as well.
  if ((color_type & PNG_COLOR_MASK_ALPHA) != 0 || png_get_valid(png, info, PNG_INFO_tRNS) != 0) png_set_strip_alpha(png);
  if ((color_type & PNG_COLOR_MASK_COLOR) == 0) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
      png_get_rowbytes(png, info) != static_cast<size_t>(width) * 3) {
    png_error(png, "unsupported pixel layout after conversion to 8-bit RGB");
  }
  state->image.height = height;
  state->image.width = width;
  state->image.channels = 3;
  state->image.pixels.resize(static_cast<size_t>(width) * height * 3);
  state->rows.resize(height);
  for (png_uint_32 y = 0; y < height; ++y) state->rows[y] = state->image.pixels.data() + static_cast<size_t>(y) * width * 3;
  png_read_image(png, state->rows.data());
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

bool encode_into(PngState* state) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, state, on_error, on_warning);
  if (png == nullptr) {
    std::snprintf(state->message, sizeof state->message, "libpng could not start an encoder");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, state, write_to_memory, flush_memory);
  const Image& image = state->image;
  png_set_IHDR(png, info, static_cast<png_uint_32>(image.width), static_cast<png_uint_32>(image.height), 8,
               image.channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, state->rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

}  // namespace

Image decode_png(std::span<const uint8_t> bytes, const std::string& name) {
  auto state = std::make_unique<PngState>();
  state->bytes = bytes;
  if (!decode_into(state.get())) {
    throw DataError(detail::concat("cannot decode PNG image '", name, "': ", state->message));
  }
  return std::move(state->image);
}

std::vector<uint8_t> encode_png(const Image& image) {
  TS_CHECK((image.channels == 1 || image.channels == 3) && image.height > 0 && image.width > 0 &&
               image.pixels.size() == static_cast<size_t>(image.height * image.width * image.channels),
           ValueError, "encode_png: expected a non-empty grey or RGB image with matching pixels, got ", image.height,
           "x", image.width, "x", image.channels, " with ", image.pixels.size(), " bytes");
  auto state = std::make_unique<PngState>();
  state->image = image;
  state->rows.resize(static_cast<size_t>(image.height));
  for (int64_t y = 0; y < image.height; ++y) {
    state->rows[static_cast<size_t>(y)] = state->image.pixels.data() + y * image.width * image.channels;
  }
  TS_CHECK(encode_into(state.get()), DataError, "encode_png: libpng failed: ", state->message);
  return std::move(state->encoded);
}

#else  // no libpng

bool png_supported() { return false; }

Image decode_png(std::span<const uint8_t>, const std::string& name) {
  throw NotCompiledError(detail::concat("cannot decode PNG image '", name,
                                        "': Tessera was built without libpng (install Debian's libpng-dev and reconfigure)"));
}

std::vector<uint8_t> encode_png(const Image&) {
  throw NotCompiledError("encode_png: Tessera was built without libpng (install Debian's libpng-dev and reconfigure)");
}

#endif

}  // namespace tessera::data
