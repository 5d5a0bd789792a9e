// Adadelta: torch.optim.Adadelta's update, element for element.
//
//   ts::optim::Adadelta opt(model.parameters(), {.lr = 1.0});
//
// Per step, with g the gradient (negated when maximize):
//   g += weight_decay * p                        (when weight_decay != 0)
//   v = rho * v + (1 - rho) * g * g
//   delta = sqrt(u + eps) / sqrt(v + eps) * g
//   u = rho * u + (1 - rho) * delta * delta
//   p -= lr * delta
// State: "step" (0-d float64), "square_avg" (v), "acc_delta" (u).
#pragma once

#include "tessera/optim/optimizer.h"

namespace tessera::optim {

struct AdadeltaOptions {
  double lr = 1.0;
  double rho = 0.9;
  double eps = 1e-6;
  double weight_decay = 0.0;
  bool maximize = false;
};

class Adadelta : public Optimizer {
 public:
  Adadelta(std::vector<Tensor> params, const AdadeltaOptions& options = {});
  std::string type_name() const override { return "Adadelta"; }
  const AdadeltaOptions& options() const { return options_; }

 protected:
  void update(Tensor& param, const Tensor& grad, StateDict& state) override;
  std::vector<StateSlot> state_slots() const override;
  void validate_options() const override;

 private:
  AdadeltaOptions options_;
};

}  // namespace tessera::optim
