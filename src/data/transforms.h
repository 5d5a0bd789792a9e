// Image transforms computed exactly as torchvision computes them in float32, so that a
// batch here is bit-identical to the batch a PyTorch script sees:
//   ToTensor:  x = u8.float().div(255)       -> float(byte) / 255.0f
//   Normalize: x.sub_(mean).div_(std)        -> (x - float(mean)) / float(std)
// with mean and std rounded to the tensor's dtype first (torchvision's torch.as_tensor).
// Each step is one correctly rounded IEEE operation; no reciprocal, no fused multiply-add.
//
//   ts::Tensor x = ts::data::Normalize{0.1307, 0.3081}(ts::data::to_tensor(images_u8));
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/tensor/tensor.h"

namespace tessera::data {

// One byte as ToTensor maps it.
inline float to_unit_float(uint8_t byte) { return static_cast<float>(byte) / 255.0f; }

// uint8 of any shape to float32 of the same shape, each element byte / 255. (torchvision's
// ToTensor also moves HWC to CHW; Tessera's images are already [N, C, H, W] or [N, H, W].)
Tensor to_tensor(const Tensor& images);

struct Normalize {
  std::vector<double> mean;  // one per channel, or one for every channel
  std::vector<double> std;

  Normalize(double mean, double std);
  Normalize(std::vector<double> mean, std::vector<double> std);

  // x: float32 or float64 [..., C, H, W]; returns a new tensor (torchvision's inplace=False).
  Tensor operator()(const Tensor& x) const;

  // One float32 value of channel `channel`, as operator() computes it.
  float apply(float x, int64_t channel = 0) const {
    size_t c = mean.size() == 1 ? 0 : static_cast<size_t>(channel);
    return (x - static_cast<float>(mean[c])) / static_cast<float>(std[c]);
  }
};

// The MNIST and Fashion-MNIST training-set statistics used by PyTorch's examples.
inline const Normalize kMnistNormalize{0.1307, 0.3081};
inline const Normalize kFashionMnistNormalize{0.2860, 0.3530};

}  // namespace tessera::data
