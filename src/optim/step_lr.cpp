// StepLR, following torch.optim.lr_scheduler.StepLR.get_lr (torch 1.13).
#include "tessera/optim/step_lr.h"

#include <cmath>

#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"

namespace tessera::optim {

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : optimizer_(optimizer), step_size_(step_size), gamma_(gamma), base_lr_(optimizer.lr()) {
  TS_CHECK(step_size > 0, ValueError, "StepLR: step_size must be positive, got ", step_size);
  TS_CHECK(std::isfinite(gamma) && gamma >= 0.0, ValueError, "StepLR: invalid gamma ", gamma);
  step();
}

void StepLR::step() {
  ++last_epoch_;
  // PyTorch's chained form reads the optimizer's current lr, so a user's set_lr between
  // steps carries forward, as there.
  if (last_epoch_ != 0 && last_epoch_ % step_size_ == 0) optimizer_.set_lr(optimizer_.lr() * gamma_);
  last_lr_ = optimizer_.lr();
}

StateDict StepLR::state_dict() const {
  StateDict out;
  out.insert("last_epoch", full({}, static_cast<double>(last_epoch_), {.dtype = DType::i64}));
  out.insert("step_size", full({}, static_cast<double>(step_size_), {.dtype = DType::i64}));
  out.insert("gamma", full({}, gamma_, {.dtype = DType::f64}));
  out.insert("base_lr", full({}, base_lr_, {.dtype = DType::f64}));
  out.insert("last_lr", full({}, last_lr_, {.dtype = DType::f64}));
  return out;
}

void StepLR::load_state_dict(const StateDict& state) {
  for (const char* key : {"last_epoch", "step_size", "gamma", "base_lr", "last_lr"}) {
    TS_CHECK(state.contains(key), ValueError, "StepLR.load_state_dict: missing key '", key, "'");
    TS_CHECK(state.at(key).numel() == 1, ValueError, "StepLR.load_state_dict: '", key,
             "' should hold one value, got ", state.at(key).str());
  }
  for (const auto& [key, value] : state) {
    TS_CHECK(key == "last_epoch" || key == "step_size" || key == "gamma" || key == "base_lr" || key == "last_lr",
             ValueError, "StepLR.load_state_dict: unexpected key '", key, "'");
  }
  const int64_t step_size = state.at("step_size").item<int64_t>();
  const double gamma = state.at("gamma").item<double>();
  TS_CHECK(step_size > 0, ValueError, "StepLR.load_state_dict: step_size must be positive, got ", step_size);
  TS_CHECK(std::isfinite(gamma) && gamma >= 0.0, ValueError, "StepLR.load_state_dict: invalid gamma ", gamma);
  step_size_ = step_size;
  gamma_ = gamma;
  last_epoch_ = state.at("last_epoch").item<int64_t>();
  base_lr_ = state.at("base_lr").item<double>();
  last_lr_ = state.at("last_lr").item<double>();
}

}  // namespace tessera::optim
