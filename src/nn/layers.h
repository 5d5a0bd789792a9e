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

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  bool bias = true;
};

// 1-D convolution of [N, C, L] (or [C, L]): weight [out, in, k], bias [out], initialised
// as PyTorch's Conv1d (kaiming_uniform with a = sqrt(5), fan_in = in * k).
//
//   ts::nn::Conv1d conv(16, 32, 3, {.padding = 1});
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const Conv1dOptions& options = {});
  Tensor forward(Tensor input) override;
  std::string extra_repr() const override;

  Tensor weight;
  Tensor bias;

 private:
  int64_t in_channels_, out_channels_, kernel_size_;
  Conv1dOptions options_;
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

struct AvgPool2dModuleOptions {
  std::optional<Size2> stride{};  // unset: kernel_size, as in PyTorch
  Size2 padding = 0;
  bool count_include_pad = true;
  std::optional<int64_t> divisor_override{};
};

//   ts::nn::AvgPool2d pool(2);                       // 2x2 windows, stride 2
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel_size, const AvgPool2dModuleOptions& options = {});
  Tensor forward(Tensor input) override;
  std::string extra_repr() const override;

 private:
  Size2 kernel_size_;
  Size2 stride_;
  AvgPool2dModuleOptions options_;
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

// Batch normalisation over the channels of [N, C, ...], as PyTorch's _BatchNorm: training
// normalises with the batch's mean and biased variance and updates the running statistics
// (unbiased variance) and num_batches_tracked; eval normalises with the running
// statistics. The buffers are part of state_dict() under PyTorch's names; under FSDP they
// stay whole on every rank (only parameters are sharded), each rank updating them from its
// own rows. BatchNorm1d and BatchNorm2d differ only in the inputs they take.
class BatchNorm : public Module {
 public:
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

 protected:
  // `layer` names the class in errors; `input_shape` says what it takes ("[N, C, H, W]"),
  // of rank `min_rank` to `max_rank`.
  BatchNorm(const char* layer, const char* input_shape, int64_t min_rank, int64_t max_rank, int64_t num_features,
            const BatchNormOptions& options);

 private:
  const char* layer_;
  const char* input_shape_;
  int64_t min_rank_, max_rank_;
  int64_t num_features_;
  BatchNormOptions options_;
};

// torch.nn.BatchNorm1d over [N, C] or [N, C, L] (statistics per channel over N and L).
//
//   ts::nn::BatchNorm1d bn(128);
//   ts::Tensor y = bn(x);             // x [N, 128] or [N, 128, L]
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, const BatchNormOptions& options = {})
      : BatchNorm("BatchNorm1d", "[N, C] or [N, C, L]", 2, 3, num_features, options) {}
};

// torch.nn.BatchNorm2d over [N, C, H, W].
//
//   ts::nn::BatchNorm2d bn(64);
//   ts::Tensor y = bn(x);             // x [N, 64, H, W]
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, const BatchNormOptions& options = {})
      : BatchNorm("BatchNorm2d", "[N, C, H, W]", 4, 4, num_features, options) {}
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
