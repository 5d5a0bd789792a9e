// ResNet and BasicBlock: the module tree torchvision builds, registered in torchvision's
// order so that state_dict() lists the same names in the same order.
#include "tessera/models/resnet.h"

#include "tessera/nn/init.h"

namespace tessera::models {

namespace {

nn::Conv2dOptions conv_options(int64_t stride, int64_t padding) {
  return {.stride = stride, .padding = padding, .bias = false};
}

// torchvision: kaiming_normal_(weight, mode="fan_out", nonlinearity="relu").
void init_conv(nn::Conv2d& conv) {
  const Shape& shape = conv.weight.sizes();
  nn::init::set_init_rule(conv.weight, nn::init::kaiming_normal(shape[0] * shape[2] * shape[3]));
}

}  // namespace

BasicBlock::BasicBlock(int64_t in_channels, int64_t channels, int64_t stride)
    : conv1(in_channels, channels, 3, conv_options(stride, 1)),
      bn1(channels),
      conv2(channels, channels, 3, conv_options(1, 1)),
      bn2(channels) {
  TS_CHECK(stride > 0, ValueError, "BasicBlock: stride must be positive, got ", stride);
  register_modules({{"conv1", conv1}, {"bn1", bn1}, {"relu", relu}, {"conv2", conv2}, {"bn2", bn2}});
  if (stride != 1 || in_channels != channels) {
    downsample = nn::make_module<nn::Sequential>();
    downsample->emplace<nn::Conv2d>(in_channels, channels, 1, conv_options(stride, 0));
    downsample->emplace<nn::BatchNorm2d>(channels);
    register_module("downsample", *downsample);
  }
}

Tensor BasicBlock::forward(Tensor input) {
  Tensor out = relu(bn1(conv1(input)));
  out = bn2(conv2(out));
  Tensor identity = downsample ? downsample(input) : input;
  return relu(out + identity);
}

ResNet::ResNet(const std::array<int64_t, 4>& blocks, const ResNetOptions& options)
    : conv1(3, options.width, 7, conv_options(2, 3)),
      bn1(options.width),
      maxpool(3, {.stride = 2, .padding = 1}),
      avgpool(1),
      fc(options.width * 8, options.num_classes),
      options_(options) {
  TS_CHECK(options.width > 0 && options.num_classes > 0, ValueError, "ResNet: width and num_classes must be positive, got ",
           options.width, " and ", options.num_classes);
  nn::Sequential* stages[4] = {&layer1, &layer2, &layer3, &layer4};
  int64_t in_channels = options.width;
  for (int stage = 0; stage < 4; ++stage) {
    TS_CHECK(blocks[stage] > 0, ValueError, "ResNet: stage ", stage + 1, " needs at least one block, got ", blocks[stage]);
    const int64_t channels = options.width << stage;
    for (int64_t b = 0; b < blocks[stage]; ++b) {
      stages[stage]->emplace<BasicBlock>(in_channels, channels, (stage > 0 && b == 0) ? 2 : 1);
      in_channels = channels;
    }
  }
  register_modules({{"conv1", conv1}, {"bn1", bn1}, {"relu", relu}, {"maxpool", maxpool}, {"layer1", layer1},
                    {"layer2", layer2}, {"layer3", layer3}, {"layer4", layer4}, {"avgpool", avgpool}, {"fc", fc}});
  for (Module* module : modules()) {
    if (auto* conv = dynamic_cast<nn::Conv2d*>(module)) init_conv(*conv);
    if (options.zero_init_residual) {
      if (auto* block = dynamic_cast<BasicBlock*>(module)) nn::init::set_init_rule(block->bn2.weight, nn::init::zeros());
    }
  }
}

Tensor ResNet::forward(Tensor input) {
  TS_CHECK(input.defined() && input.dim() == 4 && input.size(1) == 3, ShapeError,
           "ResNet: expected images [N, 3, H, W], got ", input.defined() ? shape_str(input.sizes()) : "an undefined tensor");
  Tensor x = maxpool(relu(bn1(conv1(input))));
  x = layer4(layer3(layer2(layer1(x))));
  return fc(avgpool(x).flatten(1));
}

nn::ModuleHolder<ResNet> resnet18(const ResNetOptions& options) { return nn::make_module<ResNet>(std::array<int64_t, 4>{2, 2, 2, 2}, options); }

nn::ModuleHolder<ResNet> resnet34(const ResNetOptions& options) { return nn::make_module<ResNet>(std::array<int64_t, 4>{3, 4, 6, 3}, options); }

}  // namespace tessera::models
