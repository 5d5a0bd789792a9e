// LinearLR, following torch.optim.lr_scheduler.LinearLR (torch 1.13).
#include "tessera/optim/linear_lr.h"

#include <algorithm>

#include "tessera/tensor/error.h"

namespace tessera::optim {

LinearLR::LinearLR(Optimizer& optimizer, const LinearLROptions& options) : LRScheduler(optimizer), options_(options) {
  start(options.last_epoch, {{"start_factor", &options_.start_factor},
                             {"end_factor", &options_.end_factor},
                             {"total_iters", &options_.total_iters}});
}

void LinearLR::check_settings(const std::string& where) const {
  const double start = options_.start_factor, end = options_.end_factor;
  const int64_t total = options_.total_iters;
  TS_CHECK(start > 0.0 && start <= 1.0, ValueError, where, ": start_factor ", start, " must be in (0, 1]");
  TS_CHECK(end >= 0.0 && end <= 1.0, ValueError, where, ": end_factor ", end, " must be in [0, 1]");
  TS_CHECK(total > 0, ValueError, where, ": total_iters must be positive, got ", total);
}

std::vector<double> LinearLR::get_lr() const {
  const double start = options_.start_factor, end = options_.end_factor;
  const auto total = static_cast<double>(options_.total_iters);
  std::vector<double> lrs = current_lrs();
  if (last_epoch() == 0) {
    for (double& lr : lrs) lr = lr * start;
    return lrs;
  }
  if (last_epoch() > options_.total_iters) return lrs;
  const auto previous = static_cast<double>(last_epoch() - 1);
  for (double& lr : lrs) lr = lr * (1.0 + (end - start) / (total * start + previous * (end - start)));
  return lrs;
}

std::vector<double> LinearLR::closed_form_lr() const {
  const double start = options_.start_factor, end = options_.end_factor;
  const auto done = static_cast<double>(std::min(options_.total_iters, last_epoch()));
  std::vector<double> lrs;
  for (double base_lr : base_lrs()) {
    lrs.push_back(base_lr * (start + (end - start) * done / static_cast<double>(options_.total_iters)));
  }
  return lrs;
}

}  // namespace tessera::optim
