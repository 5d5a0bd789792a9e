// MNIST and Fashion-MNIST: the four IDX files of a split, read whole and kept in memory as
// uint8 images [N, 28, 28] and uint8 labels [N]. get_batch gives float32 [B, 1, 28, 28]
// (ToTensor, then Normalize when one is given) and int64 targets [B], as torchvision's
// datasets with transforms.Compose([ToTensor(), Normalize(...)]) and a default collate.
//
//   ts::data::MNIST train("data/mnist", ts::data::Split::train, ts::data::kMnistNormalize);
//   ts::data::FashionMNIST test(ts::data::Split::test);   // Debian's dataset-fashion-mnist
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "tessera/data/dataset.h"
#include "tessera/data/transforms.h"

namespace tessera::data {

enum class Split { train, test };

class MNIST : public Dataset {
 public:
  // Reads `root`/{train,t10k}-{images-idx3,labels-idx1}-ubyte, each raw or with .gz
  // appended (the raw file wins when both are present).
  MNIST(const std::filesystem::path& root, Split split, std::optional<Normalize> normalize = std::nullopt);

  int64_t size() const override { return images_.size(0); }
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  const Tensor& images() const { return images_; }  // uint8 [N, 28, 28]
  const Tensor& labels() const { return labels_; }  // uint8 [N], 0..9
  Tensor targets() const;                           // int64 [N], as torchvision's .targets
  Split split() const { return split_; }
  const std::filesystem::path& images_file() const { return images_file_; }
  const std::filesystem::path& labels_file() const { return labels_file_; }

  static constexpr int64_t kImageSize = 28;
  static constexpr int64_t kClasses = 10;

 protected:
  // `name` and `fetch_hint` go into error messages ("Fashion-MNIST", "run scripts/...").
  MNIST(const std::filesystem::path& root, Split split, std::optional<Normalize> normalize, const std::string& name,
        const std::string& fetch_hint);

 private:
  Split split_;
  std::optional<Normalize> normalize_;
  std::filesystem::path images_file_, labels_file_;
  Tensor images_, labels_;
};

// Where Debian's dataset-fashion-mnist package installs the files (as .gz).
inline const std::filesystem::path kFashionMnistDefaultRoot = "/usr/share/datasets/fashion-mnist";

class FashionMNIST : public MNIST {
 public:
  FashionMNIST(const std::filesystem::path& root, Split split, std::optional<Normalize> normalize = std::nullopt);
  explicit FashionMNIST(Split split, std::optional<Normalize> normalize = std::nullopt)
      : FashionMNIST(kFashionMnistDefaultRoot, split, std::move(normalize)) {}
};

}  // namespace tessera::data
