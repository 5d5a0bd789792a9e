// Activation layers of torch.nn beyond ReLU (layers.h): GELU and Softmax; and Identity.
//
//   ts::nn::GELU gelu;                                   // exact: x * Phi(x)
//   ts::nn::GELU gelu_tanh(ts::GeluApproximate::tanh);   // or GELU("tanh"), as GPT-2 uses
//   ts::nn::Softmax softmax(-1);
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

class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim_(dim) {}
  Tensor forward(Tensor input) override { return softmax(input, dim_); }
  std::string extra_repr() const override;

 private:
  int64_t dim_;
};

// Returns its input unchanged (the same tensor), as torch.nn.Identity: a placeholder where
// a model may or may not have a layer.
class Identity : public Module {
 public:
  Tensor forward(Tensor input) override { return input; }
};

}  // namespace tessera::nn
