// Helpers every suite uses: whether a text contains a phrase, the message of the error an
// action throws, how far a result is from its reference, and random image batches.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"
#include "tessera/tensor/tensor.h"

namespace test_support {

// max |a - b| / max(1, max |b|): the largest elementwise error, relative where |b| > 1
// (infinite when any difference is NaN). a must be defined and of b's shape.
inline double largest_error(const tessera::Tensor& a, const tessera::Tensor& b) {
  TS_CHECK(a.defined() && a.sizes() == b.sizes(), tessera::ShapeError, "largest_error: ",
           a.defined() ? tessera::shape_str(a.sizes()) : std::string("undefined"), " against ",
           tessera::shape_str(b.sizes()));
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0, largest = 1;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = std::abs(x[i] - y[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    largest = std::max(largest, std::abs(y[i]));
  }
  return worst / largest;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The message of the `ErrorType` that `action` throws, or "" when it throws nothing. Any
// other exception passes through, so the test reports it as the failure it is.
template <typename ErrorType = tessera::Error>
std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const ErrorType& error) {
    return error.what();
  }
  return "";
}

// ||a - b|| / ||b||, the 2-norms over all elements computed in float64 on the CPU (a zero
// reference divides by 1e-300, not 0): the normwise relative error that the parity tests
// (sharded against one rank, GPU against CPU, Tessera against PyTorch) bound.
inline double relative_difference(const tessera::Tensor& a, const tessera::Tensor& b) {
  const tessera::Tensor reference = b.detach().to(tessera::DType::f64).cpu();
  const tessera::Tensor diff = a.detach().to(tessera::DType::f64).cpu() - reference;
  const double norm = std::sqrt((reference * reference).sum().item<double>());
  return std::sqrt((diff * diff).sum().item<double>()) / std::max(norm, 1e-300);
}

// `count` batches of a classification task: images [rows, image...] (randn, `dtype`) and
// labels in [0, classes) (int64), drawn batch by batch, images first, from Generator(seed).
struct ImageBatches {
  std::vector<tessera::Tensor> images, labels;
};

inline ImageBatches random_image_batches(uint64_t seed, int count, int64_t rows, const tessera::Shape& image,
                                         int64_t classes, tessera::DType dtype = tessera::DType::f32) {
  tessera::Generator gen(seed);
  tessera::Shape shape{rows};
  shape.insert(shape.end(), image.begin(), image.end());
  ImageBatches batches;
  for (int i = 0; i < count; ++i) {
    batches.images.push_back(tessera::randn(shape, gen, {.dtype = dtype}));
    batches.labels.push_back(tessera::randint(0, classes, {rows}, gen));
  }
  return batches;
}

}  // namespace test_support
