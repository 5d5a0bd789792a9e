// The network of PyTorch's MNIST example, written as a Tessera user writes it. Shared by
// examples/mnist.cpp, bench/ and the tests that compare with PyTorch.
#pragma once

#include <tessera/tessera.h>

namespace mnist {

namespace ts = tessera;

struct Net : ts::nn::Module {
  ts::nn::Conv2d conv1{1, 32, 3}, conv2{32, 64, 3};
  ts::nn::Dropout dropout1{0.25}, dropout2{0.5};
  ts::nn::Linear fc1{9216, 128}, fc2{128, 10};

  Net() {
    register_modules({{"conv1", conv1}, {"conv2", conv2}, {"dropout1", dropout1},
                      {"dropout2", dropout2}, {"fc1", fc1}, {"fc2", fc2}});
  }

  ts::Tensor forward(ts::Tensor x) override {
    x = ts::relu(conv1(x));
    x = ts::max_pool2d(ts::relu(conv2(x)), 2);
    x = ts::relu(fc1(dropout1(x).flatten(1)));
    return ts::log_softmax(fc2(dropout2(x)), 1);
  }
};

}  // namespace mnist
