// JPEG decoding and encoding with libjpeg(-turbo), decoded as PIL decodes: default DCT
// (ISLOW) and fancy upsampling, output in RGB (grey images replicated, as convert("RGB")).
//
// libjpeg reports errors through error_exit, which must not return: here it formats the
// message into a fixed buffer and longjmps back to the function that called libjpeg,
// whose frame holds no C++ object with a destructor between setjmp and longjmp (state
// lives on the heap behind a pointer set before setjmp). A premature end of the data is
// only a warning to libjpeg (it pads the image with grey); like PIL, which refuses
// truncated images, Tessera treats it as an error. Other warnings are ignored, as PIL does.
#include "tessera/config.h"
#include "tessera/data/image.h"

#if TESSERA_HAS_JPEG
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <memory>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
#include <jerror.h>
#endif

namespace tessera::data {

#if TESSERA_HAS_JPEG

bool jpeg_supported() { return true; }

namespace {

struct JpegErrorManager {
  jpeg_error_mgr base;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = "";
  bool truncated = false;
};

[[noreturn]] void on_error_exit(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

void on_message(j_common_ptr cinfo, int level) {
  auto* errors = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) errors->truncated = true;
}

struct JpegState {
  JpegErrorManager errors;
  jpeg_decompress_struct decoder;
  jpeg_compress_struct encoder;
  std::span<const uint8_t> bytes;
  Image image;
  unsigned char* encoded = nullptr;
  unsigned long encoded_size = 0;
  int quality = 90;
};

bool decode_into(JpegState* state) {
  jpeg_decompress_struct* decoder = &state->decoder;
  decoder->err = jpeg_std_error(&state->errors.base);
  state->errors.base.error_exit = on_error_exit;
  state->errors.base.emit_message = on_message;
  if (setjmp(state->errors.jump)) {
    jpeg_destroy_decompress(decoder);
    return false;
  }
  jpeg_create_decompress(decoder);
  jpeg_mem_src(decoder, state->bytes.data(), static_cast<unsigned long>(state->bytes.size()));
  jpeg_read_header(decoder, TRUE);
  if (decoder->jpeg_color_space == JCS_CMYK || decoder->jpeg_color_space == JCS_YCCK) {
    std::snprintf(state->errors.message, sizeof state->errors.message, "CMYK JPEGs are not supported (convert it to RGB)");
    jpeg_destroy_decompress(decoder);
    return false;
  }
  if (static_cast<uint64_t>(decoder->image_width) * decoder->image_height > static_cast<uint64_t>(kMaxImagePixels)) {
    std::snprintf(state->errors.message, sizeof state->errors.message, "image is larger than the pixel limit");
    jpeg_destroy_decompress(decoder);
    return false;
  }
  decoder->out_color_space = JCS_RGB;
  jpeg_start_decompress(decoder);
  if (decoder->output_components != 3) {
    std::snprintf(state->errors.message, sizeof state->errors.message, "unexpected %d output components",
                  decoder->output_components);
    jpeg_destroy_decompress(decoder);
    return false;
  }
  state->image.height = decoder->output_height;
  state->image.width = decoder->output_width;
  state->image.channels = 3;
  state->image.pixels.resize(static_cast<size_t>(decoder->output_width) * decoder->output_height * 3);
  while (decoder->output_scanline < decoder->output_height) {
    JSAMPROW row = state->image.pixels.data() + static_cast<size_t>(decoder->output_scanline) * decoder->output_width * 3;
    jpeg_read_scanlines(decoder, &row, 1);
  }
  jpeg_finish_decompress(decoder);
  jpeg_destroy_decompress(decoder);
  if (state->errors.truncated) {
    std::snprintf(state->errors.message, sizeof state->errors.message, "premature end of data: the file is truncated");
    return false;
  }
  return true;
}

bool encode_into(JpegState* state) {
  jpeg_compress_struct* encoder = &state->encoder;
  encoder->err = jpeg_std_error(&state->errors.base);
  state->errors.base.error_exit = on_error_exit;
  if (setjmp(state->errors.jump)) {
    jpeg_destroy_compress(encoder);
    return false;
  }
  jpeg_create_compress(encoder);
  jpeg_mem_dest(encoder, &state->encoded, &state->encoded_size);
  const Image& image = state->image;
  encoder->image_width = static_cast<JDIMENSION>(image.width);
  encoder->image_height = static_cast<JDIMENSION>(image.height);
  encoder->input_components = static_cast<int>(image.channels);
  encoder->in_color_space = image.channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(encoder);
  jpeg_set_quality(encoder, state->quality, TRUE);
  jpeg_start_compress(encoder, TRUE);
  while (encoder->next_scanline < encoder->image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(image.pixels.data() + static_cast<size_t>(encoder->next_scanline) * image.width * image.channels);
    jpeg_write_scanlines(encoder, &row, 1);
  }
  jpeg_finish_compress(encoder);
  jpeg_destroy_compress(encoder);
  return true;
}

}  // namespace

Image decode_jpeg(std::span<const uint8_t> bytes, const std::string& name) {
  auto state = std::make_unique<JpegState>();
  state->bytes = bytes;
  if (!decode_into(state.get())) {
    throw DataError(detail::concat("cannot decode JPEG image '", name, "': ", state->errors.message));
  }
  return std::move(state->image);
}

std::vector<uint8_t> encode_jpeg(const Image& image, int quality) {
  TS_CHECK((image.channels == 1 || image.channels == 3) && image.height > 0 && image.width > 0 &&
               image.pixels.size() == static_cast<size_t>(image.height * image.width * image.channels),
           ValueError, "encode_jpeg: expected a non-empty grey or RGB image with matching pixels, got ", image.height,
           "x", image.width, "x", image.channels, " with ", image.pixels.size(), " bytes");
  TS_CHECK(quality >= 1 && quality <= 100, ValueError, "encode_jpeg: quality must be in 1..100, got ", quality);
  auto state = std::make_unique<JpegState>();
  state->image = image;
  state->quality = quality;
  const bool ok = encode_into(state.get());
  std::vector<uint8_t> out;
  if (ok) out.assign(state->encoded, state->encoded + state->encoded_size);
  std::free(state->encoded);  // jpeg_mem_dest's buffer, ours to free
  TS_CHECK(ok, DataError, "encode_jpeg: libjpeg failed: ", state->errors.message);
  return out;
}

#else  // no libjpeg

bool jpeg_supported() { return false; }

Image decode_jpeg(std::span<const uint8_t>, const std::string& name) {
  throw NotCompiledError(detail::concat("cannot decode JPEG image '", name,
                                        "': Tessera was built without libjpeg (install Debian's libjpeg62-turbo-dev and reconfigure)"));
}

std::vector<uint8_t> encode_jpeg(const Image&, int) {
  throw NotCompiledError("encode_jpeg: Tessera was built without libjpeg (install Debian's libjpeg62-turbo-dev and reconfigure)");
}

#endif

}  // namespace tessera::data
