// LambdaLR: each group's learning rate is its base rate times a function of the epoch, as
// torch.optim.lr_scheduler.LambdaLR: lr = base_lr * lr_lambda(last_epoch).
//
//   ts::optim::LambdaLR warmup(opt, [](int64_t epoch) { return std::min(1.0, (epoch + 1) / 100.0); });
//   ts::optim::LambdaLR per_group(opt, {[](int64_t) { return 1.0; }, [](int64_t e) { return std::pow(0.95, e); }});
//
// The functions are not saved (PyTorch saves them only when they are callable objects);
// the state is the LRScheduler entries alone, and a loaded schedule uses the functions it
// was built with.
#pragma once

#include <cstdint>
#include <functional>

#include "tessera/optim/lr_scheduler.h"

namespace tessera::optim {

class LambdaLR final : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t epoch)>;
  // One function for every group.
  LambdaLR(Optimizer& optimizer, Lambda lr_lambda, int64_t last_epoch = -1);
  // One function per group, in group order.
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas, int64_t last_epoch = -1);

 protected:
  double get_lr(size_t group, double lr) const override;

 private:
  std::vector<Lambda> lr_lambdas_;
};

}  // namespace tessera::optim
