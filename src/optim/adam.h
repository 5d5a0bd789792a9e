// Adam and AdamW: torch.optim.Adam's and torch.optim.AdamW's updates, element for element.
//
//   ts::optim::Adam adam(model.parameters(), {.lr = 1e-3});
//   ts::optim::AdamW adamw(model.parameters(), {.lr = 1e-3, .weight_decay = 1e-2});
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

#include "tessera/optim/optimizer.h"

namespace tessera::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;
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

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& options = {});
  std::string type_name() const override { return decoupled_weight_decay_ ? "AdamW" : "Adam"; }
  const AdamOptions& options() const { return options_; }

 protected:
  // AdamW shares everything but where weight decay enters.
  Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled_weight_decay);
  void update(Tensor& param, const Tensor& grad, StateDict& state) override;
  std::vector<StateSlot> state_slots() const override;
  void validate_options() const override;

 private:
  AdamOptions options_;
  bool decoupled_weight_decay_;
};

// Adam with decoupled weight decay (Loshchilov and Hutter).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& options = {});
};

}  // namespace tessera::optim
