// CosineAnnealingLR: anneals each group's learning rate from its base down to eta_min along
// half a cosine over T_max epochs (and back up over the next T_max, as PyTorch's does
// without restarts), as torch.optim.lr_scheduler.CosineAnnealingLR computes it.
//
//   ts::optim::CosineAnnealingLR cosine(opt, /*T_max=*/1000, /*eta_min=*/6e-5);
//
// step() uses PyTorch's recursive form, the rate from the previous one:
//   lr_e = (1 + cos(pi e / T_max)) / (1 + cos(pi (e - 1) / T_max)) * (lr_{e-1} - eta_min) + eta_min
// (with its special cases at epoch 0, after a resume and at each period's end), so the
// values are PyTorch's to the bit, not those of the closed form
//   eta_min + (base - eta_min) * (1 + cos(pi e / T_max)) / 2,
// which SequentialLR uses when it starts the schedule at a milestone.
// State: "T_max" (int64), "eta_min", then the LRScheduler entries.
#pragma once

#include <cstdint>

#include "tessera/optim/lr_scheduler.h"

namespace tessera::optim {

class CosineAnnealingLR final : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0, int64_t last_epoch = -1);
  int64_t T_max() const { return T_max_; }
  double eta_min() const { return eta_min_; }

 protected:
  double get_lr(size_t group, double lr) const override;
  double closed_form_lr(size_t group) const override;

 private:
  int64_t T_max_;
  double eta_min_;
};

}  // namespace tessera::optim
