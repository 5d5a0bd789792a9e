// MNIST loading: find each file (raw or .gz), read it with the IDX reader, then check the
// pair describes one dataset (shapes, dtypes, matching counts, labels 0..9) before use,
// so a mixed-up or damaged download fails here, naming the file, rather than in training.
#include "tessera/data/mnist.h"

#include <cstring>

#include "tessera/data/idx.h"
#include "tessera/tensor/factory.h"

namespace tessera::data {

namespace {

std::filesystem::path find_file(const std::filesystem::path& root, const std::string& stem, const std::string& what,
                                const std::string& name, const std::string& fetch_hint) {
  const std::filesystem::path raw = root / stem, compressed = root / (stem + ".gz");
  std::error_code error;
  if (std::filesystem::is_regular_file(raw, error)) return raw;
  if (std::filesystem::is_regular_file(compressed, error)) return compressed;
  throw DataError(detail::concat(name, ": no ", what, " file in '", root.string(), "': looked for '", raw.string(),
                                 "' and '", compressed.string(), "'", fetch_hint.empty() ? "" : " (", fetch_hint,
                                 fetch_hint.empty() ? "" : ")"));
}

}  // namespace

MNIST::MNIST(const std::filesystem::path& root, Split split, std::optional<Normalize> normalize)
    : MNIST(root, split, std::move(normalize), "MNIST", "run scripts/get-mnist to fetch MNIST into data/mnist") {}

MNIST::MNIST(const std::filesystem::path& root, Split split, std::optional<Normalize> normalize,
             const std::string& name, const std::string& fetch_hint)
    : split_(split), normalize_(std::move(normalize)) {
  const std::string prefix = split == Split::train ? "train" : "t10k";
  const std::string split_name = name + (split == Split::train ? " train" : " test");
  images_file_ = find_file(root, prefix + "-images-idx3-ubyte", "images", split_name, fetch_hint);
  labels_file_ = find_file(root, prefix + "-labels-idx1-ubyte", "labels", split_name, fetch_hint);
  const std::string images_where = detail::concat(split_name, " images file '", images_file_.string(), "'");
  const std::string labels_where = detail::concat(split_name, " labels file '", labels_file_.string(), "'");
  // Both headers are checked before either file's data is read: a file of the wrong kind
  // or size is refused without reading or allocating what it claims to hold.
  const IdxHeader images = read_idx_header(images_file_);
  const IdxHeader labels = read_idx_header(labels_file_);
  TS_CHECK(images.type == IdxType::u8 && images.shape.size() == 3 && images.shape[1] == kImageSize &&
               images.shape[2] == kImageSize,
           DataError, images_where, ": expected uint8 images [N, 28, 28], found ", idx_type_name(images.type), " ",
           shape_str(images.shape));
  TS_CHECK(labels.type == IdxType::u8 && labels.shape.size() == 1, DataError, labels_where,
           ": expected uint8 labels [N], found ", idx_type_name(labels.type), " ", shape_str(labels.shape));
  TS_CHECK(labels.shape[0] == images.shape[0], DataError, labels_where, " has ", labels.shape[0], " labels but ",
           images_where, " has ", images.shape[0], " images");
  images_ = read_idx(images_file_);
  labels_ = read_idx(labels_file_);
  const uint8_t* label = labels_.numel() > 0 ? labels_.data_ptr<uint8_t>() : nullptr;
  for (int64_t i = 0; i < labels_.numel(); ++i) {
    // Label i sits after the 8-byte header of a one-dimensional IDX file.
    TS_CHECK(label[i] < kClasses, DataError, labels_where, ": label ", i, " (byte offset ", 8 + i,
             " of the uncompressed IDX content) is ", int{label[i]}, ", expected 0..9");
  }
}

Tensor MNIST::targets() const { return labels_.to(DType::i64); }

Batch MNIST::get_batch(const std::vector<int64_t>& indices) const {
  const int64_t rows = static_cast<int64_t>(indices.size());
  constexpr int64_t pixels = kImageSize * kImageSize;
  Batch batch;
  batch.data = empty({rows, 1, kImageSize, kImageSize}, {.dtype = DType::f32});
  batch.target = empty({rows}, {.dtype = DType::i64});
  if (rows == 0) return batch;
  const uint8_t* images = images_.data_ptr<uint8_t>();
  const uint8_t* labels = labels_.data_ptr<uint8_t>();
  float* data = batch.data.data_ptr<float>();
  int64_t* target = batch.target.data_ptr<int64_t>();
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t sample = indices[static_cast<size_t>(row)];
    TS_CHECK(sample >= 0 && sample < size(), IndexError, "MNIST::get_batch: index ", sample, " (row ", row,
             ") is out of range for ", size(), " samples");
    const uint8_t* image = images + sample * pixels;
    float* out = data + row * pixels;
    if (normalize_) {
      for (int64_t i = 0; i < pixels; ++i) out[i] = normalize_->apply(to_unit_float(image[i]));
    } else {
      for (int64_t i = 0; i < pixels; ++i) out[i] = to_unit_float(image[i]);
    }
    target[row] = labels[sample];
  }
  return batch;
}

FashionMNIST::FashionMNIST(const std::filesystem::path& root, Split split, std::optional<Normalize> normalize)
    : MNIST(root, split, std::move(normalize), "Fashion-MNIST",
            "run scripts/get-fashion-mnist, which installs Debian's dataset-fashion-mnist into " +
                kFashionMnistDefaultRoot.string()) {}

}  // namespace tessera::data
