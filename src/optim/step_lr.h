// StepLR: multiplies the optimizer's learning rate by gamma every step_size epochs, as
// torch.optim.lr_scheduler.StepLR does (its chained form: at each multiple of step_size,
// lr = lr * gamma, so the value after k decays is ((lr * gamma) * gamma) ... rounded
// after each product, exactly PyTorch's float).
//
//   ts::optim::StepLR scheduler(opt, /*step_size=*/1, /*gamma=*/0.7);
//   for (int epoch = 1; epoch <= epochs; ++epoch) {
//     train(...);
//     scheduler.step();
//   }
//
// Like PyTorch's, the constructor takes the initial step (epoch 0) and remembers the
// optimizer's lr as the base learning rate.
#pragma once

#include <cstdint>

#include "tessera/optim/optimizer.h"
#include "tessera/tensor/state_dict.h"

namespace tessera::optim {

class StepLR {
 public:
  // The optimizer must outlive the scheduler.
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

  // Advances one epoch and sets the optimizer's learning rate.
  void step();
  // The learning rate the last step() (or the constructor) set.
  double get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  double base_lr() const { return base_lr_; }

  // "last_epoch" (int64), "base_lr", "gamma", "last_lr" (float64) and "step_size" (int64),
  // all 0-d. Loading restores the schedule; the optimizer's lr is restored by its own
  // load_state_dict, as in PyTorch.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  Optimizer& optimizer_;
  int64_t step_size_;
  double gamma_;
  double base_lr_;
  int64_t last_epoch_ = -1;
  double last_lr_ = 0.0;
};

}  // namespace tessera::optim
