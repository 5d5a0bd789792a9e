// Adadelta: torch.optim.Adadelta's update, element for element.
//
//   ts::optim::Adadelta opt(model.parameters(), {.lr = 1.0});
//   ts::optim::Adadelta groups({{convs, {.weight_decay = 1e-4}}, {head}}, {.lr = 1.0});
//
// Per step, with g the gradient (negated when maximize):
//   g += weight_decay * p                        (when weight_decay != 0)
//   v = rho * v + (1 - rho) * g * g
//   delta = sqrt(u + eps) / sqrt(v + eps) * g
//   u = rho * u + (1 - rho) * delta * delta
//   p -= lr * delta
// State: "step" (0-d float64), "square_avg" (v), "acc_delta" (u).
#pragma once

#include <string>

#include "tessera/optim/optimizer.h"

namespace tessera::optim {

struct AdadeltaOptions {
  double lr = 1.0;
  double rho = 0.9;
  double eps = 1e-6;
  double weight_decay = 0.0;
  bool maximize = false;

  static constexpr const char* optimizer_name = "Adadelta";
  // PyTorch's checks: ValueError, prefixed by `optimizer`, for a value out of range.
  void validate(const std::string& optimizer) const;
  // Every hyper-parameter under PyTorch's name, in its order (also on AdadeltaGroupOptions).
  template <class Options, class Visit>
  static void visit(Options& o, Visit&& visit) {
    visit("lr", o.lr);
    visit("rho", o.rho);
    visit("eps", o.eps);
    visit("weight_decay", o.weight_decay);
    visit("maximize", o.maximize);
  }
};

// A parameter group's own values; the others come from the optimizer's defaults.
struct AdadeltaGroupOptions {
  GroupValue<double> lr = {};
  GroupValue<double> rho = {};
  GroupValue<double> eps = {};
  GroupValue<double> weight_decay = {};
  GroupValue<bool> maximize = {};
};

class Adadelta : public OptimizerWithGroups<AdadeltaOptions, AdadeltaGroupOptions> {
 public:
  using OptimizerWithGroups::OptimizerWithGroups;  // Adadelta(params, options = {}), Adadelta(groups, defaults = {})

 protected:
  void update(size_t group, Tensor& param, const Tensor& grad, StateDict& state) override;
  std::vector<StateSlot> state_slots(size_t group) const override;
};

}  // namespace tessera::optim
