// StepLR, following torch.optim.lr_scheduler.StepLR (torch 1.13).
#include "tessera/optim/step_lr.h"

#include <cmath>

#include "tessera/tensor/error.h"

namespace tessera::optim {

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma, int64_t last_epoch)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  start(last_epoch, {{"step_size", &step_size_}, {"gamma", &gamma_}});
}

void StepLR::check_settings(const std::string& where) const {
  TS_CHECK(step_size_ > 0, ValueError, where, ": step_size must be positive, got ", step_size_);
  TS_CHECK(std::isfinite(gamma_) && gamma_ >= 0.0, ValueError, where, ": invalid gamma ", gamma_);
}

std::vector<double> StepLR::get_lr() const {
  std::vector<double> lrs = current_lrs();
  if (last_epoch() == 0 || last_epoch() % step_size_ != 0) return lrs;
  for (double& lr : lrs) lr = lr * gamma_;
  return lrs;
}

std::vector<double> StepLR::closed_form_lr() const {
  std::vector<double> lrs;
  // Python's floor division, and float ** int (C's pow).
  const int64_t decays = last_epoch() >= 0 ? last_epoch() / step_size_ : -((-last_epoch() + step_size_ - 1) / step_size_);
  for (double base_lr : base_lrs()) lrs.push_back(base_lr * std::pow(gamma_, static_cast<double>(decays)));
  return lrs;
}

}  // namespace tessera::optim
