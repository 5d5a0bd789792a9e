// Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight
// decay: torch.optim.SGD's update, element for element.
//
//   ts::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
//   ts::optim::SGD groups({{weights, {.weight_decay = 1e-4}}, {biases}}, {.lr = 0.1, .momentum = 0.9});
//
// Per step, with g the gradient (negated when maximize):
//   g += weight_decay * p                     (when weight_decay != 0)
//   b = g on the first step, else b = momentum * b + (1 - dampening) * g
//   g = nesterov ? g + momentum * b : b       (when momentum != 0)
//   p -= lr * g
// State: "momentum_buffer" (only when momentum != 0).
#pragma once

#include <limits>
#include <string>

#include "tessera/optim/optimizer.h"

namespace tessera::optim {

struct SGDOptions {
  // Required, as in PyTorch: left unset (NaN), by the defaults and a group, it is an error.
  double lr = std::numeric_limits<double>::quiet_NaN();
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;

  static constexpr const char* optimizer_name = "SGD";
  // PyTorch's checks: ValueError, prefixed by `optimizer`, for a value out of range.
  void validate(const std::string& optimizer) const;
  // Every hyper-parameter under PyTorch's name, in its order (also on SGDGroupOptions).
  template <class Options, class Visit>
  static void visit(Options& o, Visit&& visit) {
    visit("lr", o.lr);
    visit("momentum", o.momentum);
    visit("dampening", o.dampening);
    visit("weight_decay", o.weight_decay);
    visit("nesterov", o.nesterov);
    visit("maximize", o.maximize);
  }
};

// A parameter group's own values; the others come from the optimizer's defaults.
struct SGDGroupOptions {
  GroupValue<double> lr = {};
  GroupValue<double> momentum = {};
  GroupValue<double> dampening = {};
  GroupValue<double> weight_decay = {};
  GroupValue<bool> nesterov = {};
  GroupValue<bool> maximize = {};
};

class SGD : public OptimizerWithGroups<SGDOptions, SGDGroupOptions> {
 public:
  using OptimizerWithGroups::OptimizerWithGroups;  // SGD(params, options), SGD(groups, defaults)

 protected:
  void update(size_t group, Tensor& param, const Tensor& grad, StateDict& state) override;
  std::vector<StateSlot> state_slots(size_t group) const override;
  bool updates_bf16() const override { return true; }
};

}  // namespace tessera::optim
