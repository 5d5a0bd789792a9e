// SequentialLR: runs schedulers one after another, switching at milestones, as
// torch.optim.lr_scheduler.SequentialLR. Warmup then cosine decay (nanoGPT's schedule):
//
//   ts::optim::LinearLR warmup(opt, {.start_factor = 0.01, .total_iters = 100});
//   ts::optim::CosineAnnealingLR cosine(opt, /*T_max=*/900, /*eta_min=*/6e-5);
//   ts::optim::SequentialLR schedule(opt, {warmup, cosine}, /*milestones=*/{100});
//
// As PyTorch's: building it resets every group's rate to its initial_lr, rewinds each
// scheduler by one epoch (their constructors took a step) and restarts the first; at a
// milestone the next scheduler starts from epoch 0 with its closed form (PyTorch's
// scheduler.step(0)). The schedulers must outlive it. Call step() on it only.
// State (PyTorch's keys): "_milestones" (int64 vector), "last_epoch", "_last_lr", and each
// scheduler's state under "_schedulers.<k>.".
#pragma once

#include <cstdint>
#include <functional>

#include "tessera/optim/lr_scheduler.h"

namespace tessera::optim {

class SequentialLR final : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::reference_wrapper<LRScheduler>> schedulers,
               std::vector<int64_t> milestones, int64_t last_epoch = -1);
  void step() override;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;
  const std::vector<int64_t>& milestones() const { return milestones_; }

 protected:
  // SequentialLR computes no rates itself: its schedulers do.
  double get_lr(size_t, double lr) const override { return lr; }

 private:
  std::vector<std::reference_wrapper<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

}  // namespace tessera::optim
