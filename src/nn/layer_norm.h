// torch.nn.LayerNorm: normalises over the trailing dims normalized_shape, with a learnable
// per-element weight (init 1) and bias (init 0).
//
//   ts::nn::LayerNorm ln(768);                               // over the last dim
//   ts::nn::LayerNorm ln2({4, 8}, {.eps = 1e-6, .bias = false});
//   ts::Tensor y = ln(x);                                    // x [..., 768]
//
// The kernel is fused (mean and rstd saved for the backward) and computes as PyTorch's CPU
// kernel does (tensor/cpu/layer_norm.cpp): float32 results equal torch's bit for bit.
#pragma once

#include "tessera/autograd/functions.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;  // learnable weight and (with bias) bias
  bool bias = true;                // PyTorch 2.1's bias=False: a weight only
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t normalized_shape, const LayerNormOptions& options = {});
  explicit LayerNorm(Shape normalized_shape, const LayerNormOptions& options = {});
  Tensor forward(Tensor input) override;
  std::string extra_repr() const override;
  const Shape& normalized_shape() const { return normalized_shape_; }
  const LayerNormOptions& options() const { return options_; }

  Tensor weight;  // [normalized_shape], undefined without elementwise_affine
  Tensor bias;    // [normalized_shape], undefined without elementwise_affine or bias

 private:
  Shape normalized_shape_;
  LayerNormOptions options_;
};

struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;  // learnable per-channel weight (init 1) and bias (init 0)
};

// torch.nn.GroupNorm: each sample's channels in num_groups groups, each group normalised
// over its channels and positions (ts::group_norm), then scaled and shifted per channel.
//
//   ts::nn::GroupNorm gn(8, 64);                             // x [N, 64, ...]
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, const GroupNormOptions& options = {});
  Tensor forward(Tensor input) override;
  std::string extra_repr() const override;

  Tensor weight;  // [num_channels], undefined without affine
  Tensor bias;    // [num_channels], undefined without affine

 private:
  int64_t num_groups_, num_channels_;
  GroupNormOptions options_;
};

}  // namespace tessera::nn
