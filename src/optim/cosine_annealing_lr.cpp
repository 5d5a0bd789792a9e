// CosineAnnealingLR, following torch.optim.lr_scheduler.CosineAnnealingLR (torch 1.13):
// the same branches and the same order of operations, in double, with libm's cos (what
// Python's math.cos calls).
#include "tessera/optim/cosine_annealing_lr.h"

#include <cmath>
#include <numbers>

#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"

namespace tessera::optim {
namespace {

constexpr double kPi = std::numbers::pi;  // math.pi

void check(int64_t T_max, double eta_min, const std::string& where) {
  TS_CHECK(T_max > 0, ValueError, where, ": T_max must be positive, got ", T_max);
  TS_CHECK(std::isfinite(eta_min) && eta_min >= 0.0, ValueError, where, ": invalid eta_min ", eta_min);
}

// Python's a % b for b > 0: never negative.
int64_t python_modulo(int64_t a, int64_t b) { return ((a % b) + b) % b; }

}  // namespace

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min, int64_t last_epoch)
    : LRScheduler(optimizer), T_max_(T_max), eta_min_(eta_min) {
  check(T_max, eta_min, "CosineAnnealingLR");
  start(last_epoch);
}

std::vector<double> CosineAnnealingLR::get_lr() const {
  const auto epoch = static_cast<double>(last_epoch());
  const auto T_max = static_cast<double>(T_max_);
  std::vector<double> lrs = current_lrs();
  if (last_epoch() == 0) return lrs;
  if (step_count() == 1 && last_epoch() > 0) {  // built with last_epoch > -1: from the base
    for (size_t g = 0; g < lrs.size(); ++g) {
      lrs[g] = eta_min_ + (base_lrs()[g] - eta_min_) * (1.0 + std::cos(epoch * kPi / T_max)) / 2.0;
    }
    return lrs;
  }
  if (python_modulo(last_epoch() - 1 - T_max_, 2 * T_max_) == 0) {  // the bottom: turn back up
    for (size_t g = 0; g < lrs.size(); ++g) {
      lrs[g] = lrs[g] + (base_lrs()[g] - eta_min_) * (1.0 - std::cos(kPi / T_max)) / 2.0;
    }
    return lrs;
  }
  for (double& lr : lrs) {
    lr = (1.0 + std::cos(kPi * epoch / T_max)) / (1.0 + std::cos(kPi * (epoch - 1.0) / T_max)) * (lr - eta_min_) +
         eta_min_;
  }
  return lrs;
}

std::vector<double> CosineAnnealingLR::closed_form_lr() const {
  const auto epoch = static_cast<double>(last_epoch());
  std::vector<double> lrs;
  for (double base_lr : base_lrs()) {
    lrs.push_back(eta_min_ + (base_lr - eta_min_) * (1.0 + std::cos(kPi * epoch / static_cast<double>(T_max_))) / 2.0);
  }
  return lrs;
}

StateDict CosineAnnealingLR::settings() const {
  StateDict out;
  out.insert("T_max", full({}, static_cast<double>(T_max_), {.dtype = DType::i64}));
  out.insert("eta_min", full({}, eta_min_, {.dtype = DType::f64}));
  return out;
}

void CosineAnnealingLR::load_settings(const StateDict& settings) {
  const std::string where = "CosineAnnealingLR.load_state_dict";
  const int64_t T_max = integer_at(settings, "T_max", where);
  const double eta_min = number_at(settings, "eta_min", where);
  check(T_max, eta_min, where);
  T_max_ = T_max;
  eta_min_ = eta_min;
}

}  // namespace tessera::optim
