// LinearLR, following torch.optim.lr_scheduler.LinearLR (torch 1.13).
#include "tessera/optim/linear_lr.h"

#include <algorithm>

namespace tessera::optim {

LinearLR::LinearLR(Optimizer& optimizer, const LinearLROptions& options)
    : LRScheduler(optimizer, "LinearLR"), options_(options) {
  start(options.last_epoch, {{"start_factor", &options_.start_factor, Range::positive_unit_interval},
                             {"end_factor", &options_.end_factor, Range::unit_interval},
                             {"total_iters", &options_.total_iters, Range::positive}});
}

double LinearLR::get_lr(size_t, double lr) const {
  const double start = options_.start_factor, end = options_.end_factor;
  const auto total = static_cast<double>(options_.total_iters);
  if (last_epoch() == 0) return lr * start;
  if (last_epoch() > options_.total_iters) return lr;
  const auto previous = static_cast<double>(last_epoch() - 1);
  return lr * (1.0 + (end - start) / (total * start + previous * (end - start)));
}

double LinearLR::closed_form_lr(size_t group) const {
  const double start = options_.start_factor, end = options_.end_factor;
  const auto done = static_cast<double>(std::min(options_.total_iters, last_epoch()));
  return base_lrs()[group] * (start + (end - start) * done / static_cast<double>(options_.total_iters));
}

}  // namespace tessera::optim
