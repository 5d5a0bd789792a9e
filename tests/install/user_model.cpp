// A user's program built against the installed library with
//   g++ -std=c++20 user_model.cpp $(pkg-config --cflags --libs tessera)
// It trains a tiny model for a few steps and checks the loss falls.
#include <tessera/tessera.h>

#include <iostream>

namespace ts = tessera;

struct Model : ts::nn::Module {
  ts::nn::Linear fc1{4, 16}, fc2{16, 3};
  Model() { register_modules({{"fc1", fc1}, {"fc2", fc2}}); }
  ts::Tensor forward(ts::Tensor x) override { return ts::log_softmax(fc2(ts::relu(fc1(x))), 1); }
};

int main() {
  Model model;
  ts::Generator gen(0);
  ts::Tensor x = ts::randn({32, 4}, gen);
  ts::Tensor y = ts::randint(0, 3, {32}, gen);
  float first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    model.zero_grad();
    ts::Tensor loss = ts::nll_loss(model(x), y);
    loss.backward();
    ts::NoGradGuard no_grad;
    for (ts::Tensor& p : model.parameters()) p.sub_(p.grad(), 0.1);
    (step == 0 ? first : last) = loss.item<float>();
  }
  std::cout << "loss " << first << " -> " << last << "\n";
  return last < first ? 0 : 1;
}
