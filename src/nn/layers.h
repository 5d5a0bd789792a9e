// The layers of PyTorch's torch.nn that Tessera provides, with its defaults and names.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "tessera/autograd/functions.h"
#include "tessera/nn/module.h"
#include "tessera/tensor/size2.h"

namespace tessera::nn {

// y = x W^T + b. weight [out_features, in_features], bias [out_features].
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(Tensor input) override;
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;

  Tensor weight;
  Tensor bias;  // undefined when built without bias

 private:
  int64_t in_features_, out_features_;
};

struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  bool bias = true;
};

// 2-D convolution, NCHW. weight [out, in, kh, kw], bias [out].
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, const Conv2dOptions& options = {});
  Tensor forward(Tensor input) override;
  std::string type_name() const override { return "Conv2d"; }
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
  std::string type_name() const override { return "ReLU"; }
};

// Zeroes elements with probability p in training mode (see batch_scope.h for how masks
// are keyed); the identity in eval mode.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(Tensor input) override;
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  double p() const { return p_; }

 private:
  double p_;
  uint64_t calls_ = 0;  // the step used outside a BatchScope
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0);
  Tensor forward(Tensor input) override { return max_pool2d(input, kernel_size_, stride_, padding_); }
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;

 private:
  Size2 kernel_size_;
  Size2 stride_;
  Size2 padding_;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(Tensor input) override { return input.flatten(start_dim_, end_dim_); }
  std::string type_name() const override { return "Flatten"; }
  std::string extra_repr() const override;

 private:
  int64_t start_dim_, end_dim_;
};

class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : dim_(dim) {}
  Tensor forward(Tensor input) override { return log_softmax(input, dim_); }
  std::string type_name() const override { return "LogSoftmax"; }
  std::string extra_repr() const override;

 private:
  int64_t dim_;
};

// Runs its modules in order; they are named "0", "1", ... as in PyTorch.
//
//   ts::nn::Sequential mlp;
//   mlp.emplace<ts::nn::Linear>(784, 128);
//   mlp.emplace<ts::nn::ReLU>();
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential& push_back(std::shared_ptr<Module> module);
  template <class M, class... Args>
  M& emplace(Args&&... args) {
    auto module = std::make_shared<M>(std::forward<Args>(args)...);
    M& ref = *module;
    push_back(std::move(module));
    return ref;
  }
  Tensor forward(Tensor input) override;
  std::string type_name() const override { return "Sequential"; }
  size_t size() const { return modules_.size(); }
  Module& operator[](size_t index) { return *modules_.at(index); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace tessera::nn
