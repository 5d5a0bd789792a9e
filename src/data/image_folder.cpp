// ImageFolder: listing a class tree as torchvision does, and building batches with the
// images decoded on a few threads. A batch is built in two parallel passes: decode and
// transform every image (sizes then known and checked), then write each into its row.
#include "tessera/data/image_folder.h"

#include <algorithm>
#include <exception>
#include <map>
#include <thread>

#include "tessera/tensor/factory.h"

namespace tessera::data {

namespace {

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

bool has_extension(const std::string& name, const std::vector<std::string>& extensions) {
  const std::string lower = lowercase(name);
  return std::any_of(extensions.begin(), extensions.end(), [&](const std::string& extension) {
    const std::string wanted = lowercase(extension);
    return lower.size() >= wanted.size() && lower.compare(lower.size() - wanted.size(), wanted.size(), wanted) == 0;
  });
}

// Image types torchvision's ImageFolder loads but Tessera does not decode.
const std::vector<std::string> kUndecodedImageExtensions = {".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};

// Runs body(i) for i in [0, count) on up to `threads` threads. If bodies throw, the
// exception of the smallest i is rethrown, so the error does not depend on timing.
template <class Body>
void parallel_for(int64_t count, int threads, Body&& body) {
  const int64_t workers = std::min<int64_t>(std::max(threads, 1), count);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(count));
  auto run = [&](int64_t worker) {
    for (int64_t i = worker; i < count; i += workers) {
      try {
        body(i);
      } catch (...) {
        errors[static_cast<size_t>(i)] = std::current_exception();
      }
    }
  };
  if (workers <= 1) {
    run(0);
  } else {
    std::vector<std::thread> pool;
    for (int64_t w = 1; w < workers; ++w) pool.emplace_back(run, w);
    run(0);
    for (std::thread& t : pool) t.join();
  }
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace

ImageFolder::ImageFolder(const std::filesystem::path& root, ImageFolderOptions options)
    : root_(root), options_(std::move(options)) {
  std::error_code error;
  TS_CHECK(std::filesystem::is_directory(root_, error), DataError, "ImageFolder: '", root_.string(),
           "' is not a folder");
  TS_CHECK(options_.decode_threads >= 1, ValueError, "ImageFolder: decode_threads must be at least 1, got ",
           options_.decode_threads);
  for (const auto& entry : std::filesystem::directory_iterator(root_)) {
    if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
  }
  std::sort(classes_.begin(), classes_.end());
  TS_CHECK(!classes_.empty(), DataError, "ImageFolder: found no class folder in '", root_.string(),
           "' (expected one sub-folder of images per class)");

  std::vector<std::string> empty_classes;
  for (size_t target = 0; target < classes_.size(); ++target) {
    // torchvision: sorted(os.walk(class_dir, followlinks=True)), then sorted file names:
    // files ordered by (folder path, name).
    std::map<std::string, std::vector<std::string>> files_by_folder;
    const std::filesystem::path class_dir = root_ / classes_[target];
    for (auto it = std::filesystem::recursive_directory_iterator(
             class_dir, std::filesystem::directory_options::follow_directory_symlink);
         it != std::filesystem::recursive_directory_iterator(); ++it) {
      if (!it->is_regular_file()) continue;
      const std::string name = it->path().filename().string();
      if (has_extension(name, options_.extensions)) {
        files_by_folder[it->path().parent_path().string()].push_back(name);
      } else if (has_extension(name, kUndecodedImageExtensions)) {
        ++skipped_files_;
      }
    }
    size_t before = samples_.size();
    for (auto& [folder, names] : files_by_folder) {
      std::sort(names.begin(), names.end());
      for (const std::string& name : names) {
        samples_.push_back({std::filesystem::path(folder) / name, static_cast<int64_t>(target)});
      }
    }
    if (samples_.size() == before) empty_classes.push_back(classes_[target]);
  }
  if (!empty_classes.empty()) {
    std::string names, extensions;
    for (const std::string& name : empty_classes) names += (names.empty() ? "" : ", ") + name;
    for (const std::string& extension : options_.extensions) extensions += (extensions.empty() ? "" : ", ") + extension;
    throw DataError(detail::concat("ImageFolder: found no valid file for the classes ", names, " in '",
                                   root_.string(), "' (accepted extensions: ", extensions, ")"));
  }
}

int64_t ImageFolder::class_index(const std::string& name) const {
  auto it = std::lower_bound(classes_.begin(), classes_.end(), name);
  TS_CHECK(it != classes_.end() && *it == name, IndexError, "ImageFolder: no class '", name, "' in '",
           root_.string(), "'");
  return it - classes_.begin();
}

Tensor ImageFolder::targets() const {
  std::vector<int64_t> values;
  values.reserve(samples_.size());
  for (const Sample& sample : samples_) values.push_back(sample.target);
  return tensor<int64_t>(values);
}

Image ImageFolder::load(int64_t index, int64_t epoch) const {
  TS_CHECK(index >= 0 && index < size(), IndexError, "ImageFolder: index ", index, " is out of range for ", size(),
           " samples");
  const Sample& sample = samples_[static_cast<size_t>(index)];
  Image image = read_image(sample.path);
  try {
    return apply_transforms(options_.transforms, std::move(image), {.seed = options_.seed, .epoch = epoch, .index = index});
  } catch (const Error& error) {
    throw DataError(detail::concat("ImageFolder: transforming '", sample.path.string(), "' failed: ", error.what()));
  }
}

Batch ImageFolder::get_batch_in_epoch(const std::vector<int64_t>& indices, int64_t epoch) const {
  const int64_t rows = static_cast<int64_t>(indices.size());
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t sample = indices[static_cast<size_t>(row)];
    TS_CHECK(sample >= 0 && sample < size(), IndexError, "ImageFolder::get_batch: index ", sample, " (row ", row,
             ") is out of range for ", size(), " samples");
  }
  std::vector<Image> images(static_cast<size_t>(rows));
  parallel_for(rows, options_.decode_threads,
               [&](int64_t row) { images[static_cast<size_t>(row)] = load(indices[static_cast<size_t>(row)], epoch); });

  // The batch's image size; an empty batch takes it from sample 0, so that every rank's
  // share of a global batch has the same shape even when it holds no rows.
  Image shape_source = rows > 0 || size() == 0 ? Image() : load(0, epoch);
  const Image& first = rows > 0 ? images[0] : shape_source;
  for (int64_t row = 1; row < rows; ++row) {
    const Image& image = images[static_cast<size_t>(row)];
    TS_CHECK(image.height == first.height && image.width == first.width, DataError, "ImageFolder: images of one batch ",
             "differ in size after the transforms: '", samples_[static_cast<size_t>(indices[0])].path.string(), "' is ",
             first.height, "x", first.width, ", '", samples_[static_cast<size_t>(indices[static_cast<size_t>(row)])].path.string(),
             "' is ", image.height, "x", image.width, " (end the transforms with a fixed-size Resize or CenterCrop)");
  }
  const int64_t channels = 3, height = first.height, width = first.width, plane = height * width;
  Batch batch;
  batch.data = empty({rows, channels, height, width}, {.dtype = DType::f32});
  batch.target = empty({rows}, {.dtype = DType::i64});
  if (rows == 0) return batch;
  float* data = batch.data.data_ptr<float>();
  int64_t* target = batch.target.data_ptr<int64_t>();
  if (options_.normalize) {
    const int64_t means = static_cast<int64_t>(options_.normalize->mean.size());
    TS_CHECK(means == 1 || means == channels, ValueError, "ImageFolder: Normalize has ", means,
             " means for RGB images (expected 1 or 3)");
  }
  parallel_for(rows, options_.decode_threads, [&](int64_t row) {
    const Image& image = images[static_cast<size_t>(row)];
    float* out = data + row * channels * plane;
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t i = 0; i < plane; ++i) {
        const float value = to_unit_float(image.pixels[static_cast<size_t>(i * channels + c)]);
        out[c * plane + i] = options_.normalize ? options_.normalize->apply(value, c) : value;
      }
    }
    target[row] = samples_[static_cast<size_t>(indices[static_cast<size_t>(row)])].target;
  });
  return batch;
}

}  // namespace tessera::data
