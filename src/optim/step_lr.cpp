// StepLR, following torch.optim.lr_scheduler.StepLR (torch 1.13).
#include "tessera/optim/step_lr.h"

#include <cmath>

namespace tessera::optim {

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma, int64_t last_epoch)
    : LRScheduler(optimizer, "StepLR"), step_size_(step_size), gamma_(gamma) {
  start(last_epoch, {{"step_size", &step_size_, Range::positive}, {"gamma", &gamma_, Range::non_negative}});
}

double StepLR::get_lr(size_t, double lr) const {
  if (last_epoch() == 0 || last_epoch() % step_size_ != 0) return lr;
  return lr * gamma_;
}

double StepLR::closed_form_lr(size_t group) const {
  // Python's floor division, and float ** int (C's pow).
  const int64_t decays = last_epoch() >= 0 ? last_epoch() / step_size_ : -((-last_epoch() + step_size_ - 1) / step_size_);
  return base_lrs()[group] * std::pow(gamma_, static_cast<double>(decays));
}

}  // namespace tessera::optim
