// StepLR, following torch.optim.lr_scheduler.StepLR (torch 1.13).
#include "tessera/optim/step_lr.h"

#include <cmath>

#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"

namespace tessera::optim {
namespace {

void check(int64_t step_size, double gamma, const std::string& where) {
  TS_CHECK(step_size > 0, ValueError, where, ": step_size must be positive, got ", step_size);
  TS_CHECK(std::isfinite(gamma) && gamma >= 0.0, ValueError, where, ": invalid gamma ", gamma);
}

}  // namespace

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma, int64_t last_epoch)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  check(step_size, gamma, "StepLR");
  start(last_epoch);
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

StateDict StepLR::settings() const {
  StateDict out;
  out.insert("step_size", full({}, static_cast<double>(step_size_), {.dtype = DType::i64}));
  out.insert("gamma", full({}, gamma_, {.dtype = DType::f64}));
  return out;
}

void StepLR::load_settings(const StateDict& settings) {
  const std::string where = "StepLR.load_state_dict";
  const int64_t step_size = integer_at(settings, "step_size", where);
  const double gamma = number_at(settings, "gamma", where);
  check(step_size, gamma, where);
  step_size_ = step_size;
  gamma_ = gamma;
}

}  // namespace tessera::optim
