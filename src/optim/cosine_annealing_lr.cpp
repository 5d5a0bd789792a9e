// CosineAnnealingLR, following torch.optim.lr_scheduler.CosineAnnealingLR (torch 1.13):
// the same branches and the same order of operations, in double, with libm's cos (what
// Python's math.cos calls).
#include "tessera/optim/cosine_annealing_lr.h"

#include <cmath>
#include <numbers>

namespace tessera::optim {
namespace {

constexpr double kPi = std::numbers::pi;  // math.pi

// Python's a % b for b > 0: never negative.
int64_t python_modulo(int64_t a, int64_t b) { return ((a % b) + b) % b; }

}  // namespace

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min, int64_t last_epoch)
    : LRScheduler(optimizer, "CosineAnnealingLR"), T_max_(T_max), eta_min_(eta_min) {
  start(last_epoch, {{"T_max", &T_max_, Range::positive}, {"eta_min", &eta_min_, Range::non_negative}});
}

double CosineAnnealingLR::get_lr(size_t group, double lr) const {
  const auto epoch = static_cast<double>(last_epoch());
  const auto T_max = static_cast<double>(T_max_);
  const double base_lr = base_lrs()[group];
  if (last_epoch() == 0) return lr;
  if (step_count() == 1 && last_epoch() > 0) {  // built with last_epoch > -1: from the base
    return eta_min_ + (base_lr - eta_min_) * (1.0 + std::cos(epoch * kPi / T_max)) / 2.0;
  }
  if (python_modulo(last_epoch() - 1 - T_max_, 2 * T_max_) == 0) {  // the bottom: turn back up
    return lr + (base_lr - eta_min_) * (1.0 - std::cos(kPi / T_max)) / 2.0;
  }
  return (1.0 + std::cos(kPi * epoch / T_max)) / (1.0 + std::cos(kPi * (epoch - 1.0) / T_max)) * (lr - eta_min_) +
         eta_min_;
}

double CosineAnnealingLR::closed_form_lr(size_t group) const {
  const auto epoch = static_cast<double>(last_epoch());
  return eta_min_ + (base_lrs()[group] - eta_min_) * (1.0 + std::cos(kPi * epoch / static_cast<double>(T_max_))) / 2.0;
}

}  // namespace tessera::optim
