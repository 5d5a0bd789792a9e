// Adam and AdamW: torch.optim.Adam's and torch.optim.AdamW's updates, element for element.
//
//   ts::optim::Adam adam(model.parameters(), {.lr = 1e-3});
//   ts::optim::AdamW adamw(model.parameters(), {.lr = 1e-3, .weight_decay = 1e-2});
//   ts::optim::AdamW gpt({{decay, {.weight_decay = 0.1}}, {no_decay, {.weight_decay = 0.0}}},
//                        {.lr = 6e-4, .betas = {0.9, 0.95}});      // nanoGPT's groups
//
// Per step t (from 1), with g the gradient (negated when maximize):
//   Adam:  g += weight_decay * p          AdamW: p *= 1 - lr * weight_decay
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   v_max = max(v_max, v)                  (amsgrad; the denominator then uses v_max)
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
//   p += -(lr / (1 - beta1^t)) * m / denom
// State: "step" (0-d float64), "exp_avg", "exp_avg_sq", and "max_exp_avg_sq" with amsgrad.
#pragma once

#include <array>
#include <string>

#include "tessera/optim/optimizer.h"

namespace tessera::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;

  static constexpr const char* optimizer_name = "Adam";
  // PyTorch's checks: ValueError, prefixed by `optimizer` (Adam or AdamW), for a value out of range.
  void validate(const std::string& optimizer) const;
  // Every hyper-parameter under PyTorch's name, in its order (also on AdamGroupOptions).
  template <class Options, class Visit>
  static void visit(Options& o, Visit&& visit) {
    visit("lr", o.lr);
    visit("betas", o.betas);
    visit("eps", o.eps);
    visit("weight_decay", o.weight_decay);
    visit("amsgrad", o.amsgrad);
    visit("maximize", o.maximize);
  }
};

// AdamOptions with AdamW's default weight decay.
struct AdamWOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;
};

// A parameter group's own values (Adam and AdamW); the others come from the defaults.
struct AdamGroupOptions {
  GroupValue<double> lr = {};
  GroupValue<std::array<double, 2>> betas = {};
  GroupValue<double> eps = {};
  GroupValue<double> weight_decay = {};
  GroupValue<bool> amsgrad = {};
  GroupValue<bool> maximize = {};
};

class Adam : public OptimizerWithGroups<AdamOptions, AdamGroupOptions> {
 public:
  using OptimizerWithGroups::OptimizerWithGroups;  // Adam(params, options = {}), Adam(groups, defaults = {})

 protected:
  void update(size_t group, Tensor& param, const Tensor& grad, StateDict& state) override;
  std::vector<StateSlot> state_slots(size_t group) const override;
  // AdamW shares everything but where weight decay enters.
  virtual bool decouples_weight_decay() const { return false; }
};

// Adam with decoupled weight decay (Loshchilov and Hutter). Its options() are AdamOptions
// (AdamWOptions only changes the default weight decay).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& options = {});
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& defaults = {});

 protected:
  bool decouples_weight_decay() const override { return true; }
};

}  // namespace tessera::optim
