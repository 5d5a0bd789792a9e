// Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight
// decay: torch.optim.SGD's update, element for element.
//
//   ts::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
//
// Per step, with g the gradient (negated when maximize):
//   g += weight_decay * p                     (when weight_decay != 0)
//   b = g on the first step, else b = momentum * b + (1 - dampening) * g
//   g = nesterov ? g + momentum * b : b       (when momentum != 0)
//   p -= lr * g
// State: "momentum_buffer" (only when momentum != 0).
#pragma once

#include <limits>

#include "tessera/optim/optimizer.h"

namespace tessera::optim {

struct SGDOptions {
  // Required, as in PyTorch: left unset (NaN), the constructor throws ValueError.
  double lr = std::numeric_limits<double>::quiet_NaN();
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& options);
  std::string type_name() const override { return "SGD"; }
  const SGDOptions& options() const { return options_; }

 protected:
  void update(Tensor& param, const Tensor& grad, StateDict& state) override;
  std::vector<StateSlot> state_slots() const override;
  void validate_options() const override;

 private:
  SGDOptions options_;
};

}  // namespace tessera::optim
