// Activation layers of torch.nn beyond ReLU (layers.h): GELU, SiLU, Tanh, Sigmoid, Softmax
// and LogSoftmax; and Identity.
//
//   ts::nn::GELU gelu;                                   // exact: x * Phi(x)
//   ts::nn::GELU gelu_tanh(ts::GeluApproximate::tanh);   // or GELU("tanh"), as GPT-2 uses
//   ts::nn::SiLU silu;                                   // x * sigmoid(x)
//   ts::nn::Softmax softmax(-1);
//   ts::nn::LogSoftmax log_softmax(1);
//   ts::nn::Identity skip;                               // returns its input
#pragma once

#include <string_view>

#include "tessera/autograd/functions.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

class GELU : public Module {
 public:
  explicit GELU(GeluApproximate approximate = GeluApproximate::none) : approximate_(approximate) {}
  // PyTorch's strings: "none" or "tanh".
  explicit GELU(std::string_view approximate) : approximate_(gelu_approximate_from(approximate)) {}
  Tensor forward(Tensor input) override { return gelu(input, approximate_); }
  std::string extra_repr() const override;
  GeluApproximate approximate() const { return approximate_; }

 private:
  GeluApproximate approximate_;
};

class SiLU : public Module {
 public:
  Tensor forward(Tensor input) override { return silu(input); }
};

class Tanh : public Module {
 public:
  Tensor forward(Tensor input) override { return tanh(input); }
};

class Sigmoid : public Module {
 public:
  Tensor forward(Tensor input) override { return sigmoid(input); }
};

// The base of Softmax and LogSoftmax: a normalisation along one dim, printed "dim=N" as
// PyTorch prints them.
class AlongDim : public Module {
 public:
  int64_t dim() const { return dim_; }
  std::string extra_repr() const override;

 protected:
  explicit AlongDim(int64_t dim) : dim_(dim) {}
  int64_t dim_;
};

class Softmax : public AlongDim {
 public:
  explicit Softmax(int64_t dim) : AlongDim(dim) {}
  Tensor forward(Tensor input) override { return softmax(input, dim_); }
};

class LogSoftmax : public AlongDim {
 public:
  explicit LogSoftmax(int64_t dim) : AlongDim(dim) {}
  Tensor forward(Tensor input) override { return log_softmax(input, dim_); }
};

// Returns its input unchanged (the same tensor), as torch.nn.Identity: a placeholder where
// a model may or may not have a layer.
class Identity : public Module {
 public:
  Tensor forward(Tensor input) override { return input; }
};

}  // namespace tessera::nn
