// LinearLR: scales each group's learning rate by a factor that moves linearly from
// start_factor to end_factor over total_iters epochs, then stays: PyTorch's warmup, as
// torch.optim.lr_scheduler.LinearLR computes it (its chainable form in step(), the
// closed form when SequentialLR starts it at a milestone).
//
//   ts::optim::LinearLR warmup(opt, {.start_factor = 0.01, .end_factor = 1.0, .total_iters = 100});
//
// At epoch 0 lr = base * start_factor; at epoch e in [1, total_iters]
//   lr = lr_{e-1} * (1 + (end - start) / (total_iters * start + (e - 1) * (end - start))).
// start_factor must be in (0, 1] (as PyTorch 2 checks; 1.13 also took 0, which freezes the
// rate at 0 for good), end_factor in [0, 1].
// State: "start_factor", "end_factor", "total_iters" (int64), then the LRScheduler entries.
#pragma once

#include <cstdint>

#include "tessera/optim/lr_scheduler.h"

namespace tessera::optim {

struct LinearLROptions {
  double start_factor = 1.0 / 3.0;
  double end_factor = 1.0;
  int64_t total_iters = 5;
  int64_t last_epoch = -1;
};

class LinearLR final : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, const LinearLROptions& options = {});
  const LinearLROptions& options() const { return options_; }

 protected:
  double get_lr(size_t group, double lr) const override;
  double closed_form_lr(size_t group) const override;

 private:
  LinearLROptions options_;
};

}  // namespace tessera::optim
