// torch.nn.Upsample: F.interpolate as a module (ts::interpolate, autograd/spatial_ops.h).
//
//   ts::nn::Upsample up({.scale_factor = {2.0}, .mode = "bilinear"});
//   ts::Tensor y = up(x);                       // x [N, C, H, W] -> [N, C, 2H, 2W]
//   ts::nn::Upsample to_size({.size = {32, 48}});  // nearest
#pragma once

#include "tessera/autograd/spatial_ops.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

class Upsample : public Module {
 public:
  // Checked on the first forward, as PyTorch checks them in F.interpolate.
  explicit Upsample(InterpolateOptions options) : options_(std::move(options)) {}
  Tensor forward(Tensor input) override { return interpolate(input, options_); }
  // As PyTorch prints it: "scale_factor=2.0, mode='bilinear'" or "size=(32, 48), mode='nearest'".
  std::string extra_repr() const override;
  const InterpolateOptions& options() const { return options_; }

 private:
  InterpolateOptions options_;
};

}  // namespace tessera::nn
