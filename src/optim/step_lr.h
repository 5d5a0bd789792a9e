// StepLR: multiplies each group's learning rate by gamma every step_size epochs, as
// torch.optim.lr_scheduler.StepLR does (its chained form: at each multiple of step_size,
// lr = lr * gamma, so the value after k decays is ((lr * gamma) * gamma) ... rounded after
// each product, exactly PyTorch's float).
//
//   ts::optim::StepLR scheduler(opt, /*step_size=*/1, /*gamma=*/0.7);
//   for (int epoch = 1; epoch <= epochs; ++epoch) {
//     train(...);
//     scheduler.step();
//   }
// State: "step_size" (int64), "gamma", then the LRScheduler entries.
#pragma once

#include <cstdint>

#include "tessera/optim/lr_scheduler.h"

namespace tessera::optim {

class StepLR final : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1, int64_t last_epoch = -1);
  int64_t step_size() const { return step_size_; }
  double gamma() const { return gamma_; }

 protected:
  double get_lr(size_t group, double lr) const override;
  double closed_form_lr(size_t group) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

}  // namespace tessera::optim
