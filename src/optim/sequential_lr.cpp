// SequentialLR, following torch.optim.lr_scheduler.SequentialLR (torch 1.13).
#include "tessera/optim/sequential_lr.h"

#include <algorithm>

#include "tessera/tensor/error.h"
#include "tessera/tensor/factory.h"

namespace tessera::optim {

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::reference_wrapper<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones, int64_t last_epoch)
    : LRScheduler(optimizer, "SequentialLR"), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  TS_CHECK(!schedulers_.empty(), ValueError, "SequentialLR: no schedulers given");
  for (size_t k = 0; k < schedulers_.size(); ++k) {
    TS_CHECK(&schedulers_[k].get().optimizer() == &optimizer, ValueError,
             "SequentialLR expects all schedulers to belong to the same optimizer, but scheduler ", k, " (",
             schedulers_[k].get().type_name(), ") belongs to another");
    TS_CHECK(&schedulers_[k].get() != this, ValueError, "SequentialLR: it cannot run itself");
  }
  TS_CHECK(milestones_.size() + 1 == schedulers_.size(), ValueError,
           "SequentialLR expects one more scheduler than milestones, but got ", schedulers_.size(),
           " schedulers and ", milestones_.size(), " milestones");
  TS_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()), ValueError,
           "SequentialLR: the milestones must be in increasing order");
  last_epoch_ = last_epoch + 1;
  // Reset the rates to their initial values and undo the step the schedulers' own
  // constructors took; then start the first one again.
  for (size_t g = 0; g < optimizer.param_group_count(); ++g) {
    const std::optional<double> initial = optimizer.initial_lr(g);
    TS_CHECK(initial.has_value(), ValueError, "SequentialLR: parameter group ", g, " has no initial_lr");
    optimizer.set_lr(g, *initial);
  }
  for (auto& scheduler : schedulers_) --scheduler.get().last_epoch_;
  schedulers_.front().get().initial_step();
  last_lr_ = schedulers_.front().get().get_last_lr();
}

void SequentialLR::step() {
  ++last_epoch_;
  // bisect_right: the first milestone after last_epoch picks the scheduler.
  const auto index = static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) -
                                         milestones_.begin());
  LRScheduler& scheduler = schedulers_[index].get();
  if (index > 0 && milestones_[index - 1] == last_epoch_) {
    scheduler.step_to(0);
  } else {
    scheduler.step();
  }
  last_lr_ = scheduler.get_last_lr();
}

StateDict SequentialLR::state_dict() const {
  StateDict out;
  out.insert("_milestones", tensor<int64_t>(milestones_, {static_cast<int64_t>(milestones_.size())}));
  Tensor epoch = full({}, 0.0, {.dtype = DType::i64});
  epoch.data_ptr<int64_t>()[0] = last_epoch_;
  out.insert("last_epoch", epoch);
  out.insert("_last_lr", tensor<double>(last_lr_, {static_cast<int64_t>(last_lr_.size())}));
  for (size_t k = 0; k < schedulers_.size(); ++k) {
    const std::string prefix = "_schedulers." + std::to_string(k) + ".";
    for (const auto& [key, value] : schedulers_[k].get().state_dict()) out.insert(prefix + key, value);
  }
  return out;
}

void SequentialLR::load_state_dict(const StateDict& state) {
  const std::string where = "SequentialLR.load_state_dict";
  std::vector<StateDict> nested(schedulers_.size());
  for (const auto& [key, value] : state) {
    if (key == "_milestones" || key == "last_epoch" || key == "_last_lr") continue;
    size_t k = schedulers_.size();
    const std::string prefix = "_schedulers.";
    const size_t dot = key.find('.', prefix.size());
    if (key.rfind(prefix, 0) == 0 && dot != std::string::npos) {
      try {
        k = std::stoul(key.substr(prefix.size(), dot - prefix.size()));
      } catch (const std::exception&) {
        k = schedulers_.size();
      }
    }
    TS_CHECK(k < schedulers_.size(), ValueError, where, ": unexpected key '", key, "'");
    nested[k].insert(key.substr(dot + 1), value);
  }
  TS_CHECK(state.contains("_milestones"), ValueError, where, ": missing key '_milestones'");
  const Tensor& milestones = state.at("_milestones");
  TS_CHECK(milestones.dim() == 1 && milestones.numel() == static_cast<int64_t>(milestones_.size()), ValueError, where,
           ": '_milestones' should hold ", milestones_.size(), " values, got ", milestones.str());
  std::vector<int64_t> loaded_milestones = milestones.to(DType::i64).to_vector<int64_t>();
  TS_CHECK(std::is_sorted(loaded_milestones.begin(), loaded_milestones.end()), ValueError, where,
           ": the milestones must be in increasing order");
  const int64_t last_epoch = integer_at(state, "last_epoch", where);
  TS_CHECK(state.contains("_last_lr"), ValueError, where, ": missing key '_last_lr'");
  const Tensor& last_lr = state.at("_last_lr");
  TS_CHECK(last_lr.dim() == 1 && last_lr.numel() == static_cast<int64_t>(optimizer().param_group_count()), ValueError,
           where, ": '_last_lr' should hold one value per parameter group, got ", last_lr.str());
  // The schedulers check their own parts; keep their states to roll back if a later one fails.
  std::vector<StateDict> previous;
  for (auto& scheduler : schedulers_) previous.push_back(scheduler.get().state_dict());
  try {
    for (size_t k = 0; k < schedulers_.size(); ++k) schedulers_[k].get().load_state_dict(nested[k]);
  } catch (...) {
    for (size_t k = 0; k < schedulers_.size(); ++k) schedulers_[k].get().load_state_dict(previous[k]);
    throw;
  }
  milestones_ = std::move(loaded_milestones);
  last_epoch_ = last_epoch;
  last_lr_ = last_lr.to(DType::f64).to_vector<double>();
}

}  // namespace tessera::optim
