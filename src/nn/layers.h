// The layers of PyTorch's torch.nn that Tessera provides, with its defaults and names.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "tessera/autograd/functions.h"
#include "tessera/nn/activation.h"  // LogSoftmax, which lived here
#include "tessera/nn/containers.h"  // Sequential, which lived here
#include "tessera/nn/module.h"
#include "tessera/tensor/size2.h"

namespace tessera::nn {

struct LinearOptions {
  bool bias = true;
};

// y = x W^T + b. weight [out_features, in_features], bias [out_features].
//
//   ts::nn::Linear fc(784, 128);
//   ts::nn::Linear head(768, 50257, {.bias = false});
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, const LinearOptions& options = {});
  Tensor forward(Tensor input) override;
  std::string extra_repr() const override;

  Tensor weight;
  Tensor bias;  // undefined when built without bias

 private:
  int64_t in_features_, out_features_;
};

// The layer's options: how it slides (as ts::conv2d's Conv2dFuncOptions) and whether it has
// a bias.
struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  bool bias = true;
};

// 2-D convolution, NCHW. weight [out, in, kh, kw], bias [out].
//
//   ts::nn::Conv2d conv(3, 64, 7, {.stride = 2, .padding = 3, .bias = false});
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, const Conv2dOptions& options = {});
  Tensor forward(Tensor input) override;
  std::string extra_repr() const override;

  Tensor weight;
  Tensor bias;

 private:
  int64_t in_channels_, out_channels_;
  Size2 kernel_size_;
  Conv2dOptions options_;
};

class ReLU : public Module {
 public:
  Tensor forward(Tensor input) override { return relu(input); }
};

// Zeroes elements with probability p in training mode; the identity in eval mode. Masks
// are keyed by the BatchScope's position (batch_scope.h), or outside one by the default
// generator (ts::manual_seed), each call taking the next step of its sequence.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(Tensor input) override;
  std::string extra_repr() const override;
  double p() const { return p_; }
  // The key of this module's next mask: seed, step and first row from the current
  // BatchScope (outside one, from the default generator), the stream from path(). forward()
  // takes one per training call; attention's dropout (nn/attention.h) takes one too.
  DropoutKey next_key();

 private:
  DropoutKey fresh_key();
  double p_;
};

struct MaxPool2dOptions {
  std::optional<Size2> stride{};  // unset: kernel_size, as in PyTorch
  Size2 padding = 0;
};

//   ts::nn::MaxPool2d pool(3, {.stride = 2, .padding = 1});   // ResNet's
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, const MaxPool2dOptions& options = {});
  Tensor forward(Tensor input) override { return max_pool2d(input, kernel_size_, stride_, padding_); }
  std::string extra_repr() const override;

 private:
  Size2 kernel_size_;
  Size2 stride_;
  Size2 padding_;
};

// Averages each plane down to `output_size`, as torch.nn.AdaptiveAvgPool2d (ResNet's
// global pool is AdaptiveAvgPool2d(1)).
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size) : output_size_(output_size) {}
  Tensor forward(Tensor input) override { return adaptive_avg_pool2d(input, output_size_); }
  std::string extra_repr() const override;

 private:
  Size2 output_size_;
};

struct BatchNormOptions {
  double eps = 1e-5;
  // The running statistics' update factor; nullopt gives the cumulative average over the
  // batches seen (PyTorch's momentum=None).
  std::optional<double> momentum = 0.1;
  bool affine = true;               // learnable weight (init 1) and bias (init 0)
  bool track_running_stats = true;  // running_mean, running_var, num_batches_tracked buffers
};

// torch.nn.BatchNorm2d over [N, C, H, W]. Training normalises with the batch's mean and
// biased variance and updates the running statistics (unbiased variance) and
// num_batches_tracked; eval normalises with the running statistics. The buffers are part
// of state_dict() under PyTorch's names; under FSDP they stay whole on every rank (only
// parameters are sharded), each rank updating them from its own rows.
//
//   ts::nn::BatchNorm2d bn(64);
//   ts::Tensor y = bn(x);             // x [N, 64, H, W]
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, const BatchNormOptions& options = {});
  Tensor forward(Tensor input) override;
  std::string extra_repr() const override;
  int64_t num_features() const { return num_features_; }
  const BatchNormOptions& options() const { return options_; }
  // running_mean = 0, running_var = 1, num_batches_tracked = 0.
  void reset_running_stats();

  Tensor weight;               // [C], undefined without affine
  Tensor bias;                 // [C], undefined without affine
  Tensor running_mean;         // [C], undefined without track_running_stats
  Tensor running_var;          // [C]
  Tensor num_batches_tracked;  // int64 scalar

 private:
  int64_t num_features_;
  BatchNormOptions options_;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(Tensor input) override { return input.flatten(start_dim_, end_dim_); }
  std::string extra_repr() const override;

 private:
  int64_t start_dim_, end_dim_;
};

}  // namespace tessera::nn
