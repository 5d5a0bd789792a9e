// LinearLR, following torch.optim.lr_scheduler.LinearLR (torch 1.13).
#include "tessera/optim/linear_lr.h"

#include <algorithm>

#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"

namespace tessera::optim {
namespace {

void check(double start_factor, double end_factor, int64_t total_iters, const std::string& where) {
  TS_CHECK(start_factor > 0.0 && start_factor <= 1.0, ValueError, where, ": start_factor ", start_factor,
           " must be in (0, 1]");
  TS_CHECK(end_factor >= 0.0 && end_factor <= 1.0, ValueError, where, ": end_factor ", end_factor,
           " must be in [0, 1]");
  TS_CHECK(total_iters > 0, ValueError, where, ": total_iters must be positive, got ", total_iters);
}

}  // namespace

LinearLR::LinearLR(Optimizer& optimizer, const LinearLROptions& options) : LRScheduler(optimizer), options_(options) {
  check(options.start_factor, options.end_factor, options.total_iters, "LinearLR");
  start(options.last_epoch);
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

StateDict LinearLR::settings() const {
  StateDict out;
  out.insert("start_factor", full({}, options_.start_factor, {.dtype = DType::f64}));
  out.insert("end_factor", full({}, options_.end_factor, {.dtype = DType::f64}));
  out.insert("total_iters", full({}, static_cast<double>(options_.total_iters), {.dtype = DType::i64}));
  return out;
}

void LinearLR::load_settings(const StateDict& settings) {
  const std::string where = "LinearLR.load_state_dict";
  const double start = number_at(settings, "start_factor", where);
  const double end = number_at(settings, "end_factor", where);
  const int64_t total = integer_at(settings, "total_iters", where);
  check(start, end, total, where);
  options_.start_factor = start;
  options_.end_factor = end;
  options_.total_iters = total;
}

}  // namespace tessera::optim
