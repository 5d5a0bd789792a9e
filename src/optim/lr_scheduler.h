// LRScheduler: the base of the learning-rate schedulers, with torch.optim.lr_scheduler's
// behaviour and arithmetic (torch 1.13), one rate per parameter group.
//
//   ts::optim::AdamW opt({{decay, {.weight_decay = 0.1}}, {no_decay, {.weight_decay = 0.0}}}, {.lr = 6e-4});
//   ts::optim::LinearLR warmup(opt, {.start_factor = 0.01, .total_iters = 100});
//   ts::optim::CosineAnnealingLR cosine(opt, /*T_max=*/900, /*eta_min=*/6e-5);
//   ts::optim::SequentialLR schedule(opt, {warmup, cosine}, /*milestones=*/{100});
//   for (int it = 0; it < 1000; ++it) {
//     ...                      // forward, backward
//     opt.step();
//     schedule.step();         // get_last_lr()[g]: group g's rate for the next step
//   }
//
// As in PyTorch: a scheduler built with last_epoch = -1 records each group's current lr as
// its "initial_lr" (in the optimizer, unless an earlier scheduler did) and its base_lrs,
// then takes its initial step (epoch 0), which sets the optimizer's rates. step() advances
// one epoch with the scheduler's chainable formula: the next rate from the optimizer's
// current one, so a set_lr() between steps carries forward. Every product, quotient and
// cosine is computed in double in PyTorch's order, so the rates are PyTorch's to the bit.
//
// state_dict() holds what PyTorch's does (its keys; lists as float64 vectors): the
// scheduler's settings (e.g. "step_size", "gamma"), "base_lrs", "last_epoch",
// "_step_count", "_last_lr"; the optimizer's rates are restored by the optimizer's own
// load_state_dict, as in PyTorch.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "tessera/optim/optimizer.h"
#include "tessera/tensor/state_dict.h"

namespace tessera::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one epoch and sets every group's learning rate.
  virtual void step();
  // The rates the last step() (or the constructor) set, one per group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  // Each group's initial_lr when the scheduler was built: what closed forms start from.
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return optimizer_; }

  virtual StateDict state_dict() const;
  // Every key of state_dict() must be present and valid, no other; otherwise ValueError
  // naming the key, and the scheduler is left unchanged.
  virtual void load_state_dict(const StateDict& state);

  // "StepLR", "CosineAnnealingLR", ... for checkpoints and messages.
  const std::string& type_name() const { return type_name_; }

 protected:
  // The values a setting may take; a ValueError names the setting otherwise.
  enum class Range {
    positive,                // > 0
    non_negative,            // a finite number >= 0
    unit_interval,           // [0, 1]
    positive_unit_interval,  // (0, 1]
  };
  // One of a scheduler's own settings under PyTorch's name (state_dict's first entries):
  // an int64 or a double member of the derived scheduler, saved as such, checked against
  // its range on construction and on load_state_dict (which then restores the previous
  // values).
  struct Setting {
    std::string name;
    std::variant<int64_t*, double*> member;
    Range range;
  };

  // The optimizer must outlive the scheduler. A derived constructor sets its own fields,
  // then calls start() with its settings.
  LRScheduler(Optimizer& optimizer, std::string type_name)
      : optimizer_(optimizer), type_name_(std::move(type_name)) {}
  // Checks the settings, then PyTorch's _LRScheduler.__init__ from "Initialize epoch and
  // base learning rates" on, ending with the initial step.
  void start(int64_t last_epoch, std::vector<Setting> settings = {});

  // A scheduler states its formulas per group; the base runs them over the groups.
  // PyTorch's get_lr, the chainable form: group `group`'s next rate, from its rate `lr`
  // now (the optimizer's), its base_lrs()[group], last_epoch() and step_count().
  virtual double get_lr(size_t group, double lr) const = 0;
  // PyTorch's _get_closed_form_lr, which step(epoch) uses: the rate at last_epoch() from
  // base_lrs()[group] alone; the chainable form where a scheduler has none.
  virtual double closed_form_lr(size_t group) const { return get_lr(group, optimizer_.lr(group)); }

  // The optimizer's rates now, one per group.
  std::vector<double> current_lrs() const;
  int64_t step_count() const { return step_count_; }

  // Readers of a state dict: a one-value tensor under `key` as an integer or a double.
  static int64_t integer_at(const StateDict& state, const std::string& key, const std::string& where);
  static double number_at(const StateDict& state, const std::string& key, const std::string& where);

 private:
  friend class SequentialLR;  // steps and rewinds the schedulers it runs, as PyTorch's does

  // PyTorch's step(epoch) (deprecated there): jumps to `epoch` with the closed form.
  void step_to(int64_t epoch);
  void initial_step();
  // Sets group g's rate to rate(g) for every group.
  template <class Rate>
  void apply(Rate rate);
  // ValueError, prefixed by `where`, for a setting out of its range.
  void check_settings(const std::string& where) const;
  // The settings' entries of state_dict(), and their loading from `state`.
  StateDict settings_dict() const;
  void load_settings(const StateDict& state, const std::string& where);

  Optimizer& optimizer_;
  std::string type_name_;
  std::vector<Setting> settings_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
  std::vector<double> last_lr_;
};

}  // namespace tessera::optim
