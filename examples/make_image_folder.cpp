// Writes a small synthetic image dataset in ImageFolder's layout, to try examples/resnet18
// without downloading anything:
//
//   build/examples/make_image_folder data/images                 # 4 classes, 96 + 24 images each
//   build/examples/make_image_folder data/tiny --classes 3 --train 8 --val 4 --min-size 32 --max-size 40
//
// DIR/train/<class>/<n>.{png,jpg} and DIR/val/<class>/..., classes named after colours. Each
// image is a noisy grey background with random distractor bars and one disc of the class's
// colour (varying in brightness, position and size), so a network must find the disc and
// read its colour; sizes vary (non-square) so Resize and CenterCrop matter; even-numbered
// images are PNG, odd ones JPEG, so both decoders run. Deterministic for a given --seed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include <tessera/tessera.h>
#include <tessera/tensor/philox.h>

namespace ts = tessera;
namespace data = tessera::data;

namespace {

struct Options {
  std::filesystem::path root;
  int classes = 4;
  int train = 96;
  int val = 24;
  int min_size = 40;
  int max_size = 56;
  uint64_t seed = 1;
};

const char* kUsage = R"(usage: make_image_folder DIR [options]

Writes DIR/train/<class>/ and DIR/val/<class>/ with synthetic PNG and JPEG images.

  --classes N     number of classes, 2..8 [4]
  --train N       training images per class [96]
  --val N         validation images per class [24]
  --min-size N    smallest image side in pixels [40]
  --max-size N    largest image side in pixels [56]
  --seed N        seed of the random content [1]
  --help          show this help
)";

const char* kNames[] = {"red", "green", "blue", "yellow", "magenta", "cyan", "orange", "purple"};
const float kColours[][3] = {{220, 40, 40}, {40, 190, 60}, {50, 70, 220}, {230, 210, 40},
                             {210, 50, 200}, {40, 200, 210}, {240, 140, 30}, {120, 50, 170}};

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "make_image_folder: " << message << "\n(see make_image_folder --help)\n";
  std::exit(2);
}

int parse_int(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    int value = std::stoi(text, &used);
    if (used == text.size() && value >= 0) return value;
  } catch (const std::exception&) {
  }
  usage_error(flag + " expects a non-negative integer, got '" + text + "'");
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (flag == "--classes") o.classes = parse_int(flag, value());
    else if (flag == "--train") o.train = parse_int(flag, value());
    else if (flag == "--val") o.val = parse_int(flag, value());
    else if (flag == "--min-size") o.min_size = parse_int(flag, value());
    else if (flag == "--max-size") o.max_size = parse_int(flag, value());
    else if (flag == "--seed") o.seed = static_cast<uint64_t>(parse_int(flag, value()));
    else if (!flag.empty() && flag[0] == '-') usage_error("unknown option '" + flag + "'");
    else if (o.root.empty()) o.root = flag;
    else usage_error("one output folder expected, got '" + o.root.string() + "' and '" + flag + "'");
  }
  if (o.root.empty()) usage_error("no output folder given");
  if (o.classes < 2 || o.classes > 8) usage_error("--classes must be in 2..8");
  if (o.min_size < 8 || o.max_size < o.min_size) usage_error("sizes must satisfy 8 <= --min-size <= --max-size");
  if (o.train < 1 || o.val < 1) usage_error("--train and --val must be at least 1");
  return o;
}

// Uniform draws in [0, 1) keyed by (seed, image, draw number).
class Draws {
 public:
  Draws(uint64_t seed, uint64_t image) : seed_(seed), image_(image) {}
  float next() { return ts::philox::unit_float(ts::philox::block(seed_, image_, counter_++).word[0]); }
  int next_int(int low, int high) { return low + static_cast<int>(next() * static_cast<float>(high - low + 1)); }

 private:
  uint64_t seed_, image_, counter_ = 0;
};

data::Image make_image(const Options& o, int label, Draws& draws) {
  const int height = draws.next_int(o.min_size, o.max_size), width = draws.next_int(o.min_size, o.max_size);
  data::Image image(height, width);
  const float background = 70 + 110 * draws.next();
  for (int64_t y = 0; y < height; ++y) {
    for (int64_t x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) image.at(y, x, c) = static_cast<uint8_t>(background + 50 * (draws.next() - 0.5f));
    }
  }
  // Two distractor bars in random colours.
  for (int bar = 0; bar < 2; ++bar) {
    const bool horizontal = draws.next() < 0.5f;
    const int position = draws.next_int(0, (horizontal ? height : width) - 1), thickness = draws.next_int(1, 3);
    const uint8_t colour[3] = {static_cast<uint8_t>(255 * draws.next()), static_cast<uint8_t>(255 * draws.next()),
                               static_cast<uint8_t>(255 * draws.next())};
    for (int64_t y = 0; y < height; ++y) {
      for (int64_t x = 0; x < width; ++x) {
        const int64_t along = horizontal ? y : x;
        if (along >= position && along < position + thickness) {
          for (int c = 0; c < 3; ++c) image.at(y, x, c) = colour[c];
        }
      }
    }
  }
  // The class: a disc of the class colour.
  const int side = std::min(height, width);
  const float radius = static_cast<float>(side) * (0.18f + 0.14f * draws.next());
  const float cy = radius + (static_cast<float>(height) - 2 * radius) * draws.next();
  const float cx = radius + (static_cast<float>(width) - 2 * radius) * draws.next();
  const float brightness = 0.8f + 0.35f * draws.next();
  for (int64_t y = 0; y < height; ++y) {
    for (int64_t x = 0; x < width; ++x) {
      const float dy = static_cast<float>(y) + 0.5f - cy, dx = static_cast<float>(x) + 0.5f - cx;
      if (dy * dy + dx * dx > radius * radius) continue;
      for (int c = 0; c < 3; ++c) {
        const float v = kColours[label][c] * brightness + 20 * (draws.next() - 0.5f);
        image.at(y, x, c) = static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
      }
    }
  }
  return image;
}

void write_split(const Options& o, const std::string& split, int per_class, uint64_t first_image) {
  for (int label = 0; label < o.classes; ++label) {
    const std::filesystem::path folder = o.root / split / kNames[label];
    std::filesystem::create_directories(folder);
    for (int n = 0; n < per_class; ++n) {
      const uint64_t image_id = first_image + static_cast<uint64_t>(label) * 1'000'000 + static_cast<uint64_t>(n);
      Draws draws(o.seed, image_id);
      data::Image image = make_image(o, label, draws);
      char name[32];
      std::snprintf(name, sizeof name, "%04d.%s", n, n % 2 == 0 ? "png" : "jpg");
      if (n % 2 == 0) {
        data::write_png(folder / name, image);
      } else {
        data::write_jpeg(folder / name, image, 90);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options options = parse_options(argc, argv);
  try {
    write_split(options, "train", options.train, 0);
    write_split(options, "val", options.val, 1'000'000'000);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "make_image_folder: error: %s\n", error.what());
    return 1;
  }
  std::printf("wrote %d classes (%d training and %d validation images each) to %s\n", options.classes, options.train,
              options.val, options.root.string().c_str());
  return 0;
}
