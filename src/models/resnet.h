// ResNet with basic blocks (ResNet-18 and -34), as torchvision.models.resnet builds them:
// the same module tree, parameter and buffer names (conv1, bn1, layer1.0.conv1, ...,
// layer2.0.downsample.0 / .1, fc) and initialisation, so that torchvision's weights,
// converted to safetensors (tools/torchvision_to_safetensors.py), load with
// load_state_dict, and a checkpoint saved here opens in torchvision.
//
//   auto model = ts::models::resnet18({.num_classes = 10});
//   ts::fsdp::fully_shard(*model, world, {.wrap_policy = ts::fsdp::WrapPolicy::module_type({"BasicBlock"})});
//   ts::Tensor logits = model(images);              // images [N, 3, H, W], H and W >= 32
//   model->load_state_dict(ts::io::load("resnet18.safetensors"));
//
// Initialisation is torchvision's: convolutions kaiming_normal_(mode="fan_out",
// nonlinearity="relu"), batch norms weight 1 and bias 0, fc nn.Linear's default; with
// zero_init_residual, each block's last batch norm starts at weight 0. Values are keyed
// by (seed, parameter name, index) like every Tessera parameter, so they do not equal
// torchvision's random draws, only their distribution.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "tessera/nn/layers.h"
#include "tessera/nn/module.h"
#include "tessera/nn/module_holder.h"

namespace tessera::models {

// Two 3x3 convolutions with batch norms, and the identity (or a 1x1 convolution and a
// batch norm, `downsample`, where the stride or the channel count changes) added before
// the last ReLU. type_name() is "BasicBlock": FSDP's module_type wrap policy can make
// each block a unit.
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in_channels, int64_t channels, int64_t stride = 1);
  Tensor forward(Tensor input) override;

  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::ReLU relu;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::ModuleHolder<nn::Sequential> downsample;  // empty when the input already has the output's shape
};

struct ResNetOptions {
  int64_t num_classes = 1000;
  bool zero_init_residual = false;
  // Channels of the first stage (doubled by each later stage). 64 is torchvision's; a
  // smaller width gives the same structure with fewer parameters (not torchvision-loadable).
  int64_t width = 64;
};

// torchvision's ResNet for basic blocks: conv1 (7x7, stride 2), bn1, relu, maxpool (3x3,
// stride 2), layer1..layer4 (Sequential of BasicBlock; stride 2 from layer2 on), avgpool
// (AdaptiveAvgPool2d(1)), fc. Takes float [N, 3, H, W] and returns logits [N, num_classes].
class ResNet : public nn::Module {
 public:
  // blocks: basic blocks per stage, {2, 2, 2, 2} for ResNet-18.
  ResNet(const std::array<int64_t, 4>& blocks, const ResNetOptions& options = {});
  Tensor forward(Tensor input) override;
  const ResNetOptions& options() const { return options_; }

  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::ReLU relu;
  nn::MaxPool2d maxpool;
  nn::Sequential layer1, layer2, layer3, layer4;
  nn::AdaptiveAvgPool2d avgpool;
  nn::Linear fc;

 private:
  ResNetOptions options_;
};

// ResNet-18 (11.7M parameters at 1000 classes) and ResNet-34, as torchvision's
// resnet18() / resnet34() without pretrained weights.
nn::ModuleHolder<ResNet> resnet18(const ResNetOptions& options = {});
nn::ModuleHolder<ResNet> resnet34(const ResNetOptions& options = {});

}  // namespace tessera::models
