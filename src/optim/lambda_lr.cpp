// LambdaLR, following torch.optim.lr_scheduler.LambdaLR (torch 1.13).
#include "tessera/optim/lambda_lr.h"

#include "tessera/tensor/error.h"

namespace tessera::optim {

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lr_lambda, int64_t last_epoch)
    : LambdaLR(optimizer, std::vector<Lambda>(optimizer.param_group_count(), lr_lambda), last_epoch) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas, int64_t last_epoch)
    : LRScheduler(optimizer, "LambdaLR"), lr_lambdas_(std::move(lr_lambdas)) {
  TS_CHECK(lr_lambdas_.size() == optimizer.param_group_count(), ValueError, "LambdaLR: expected ",
           optimizer.param_group_count(), " lr_lambdas (one per parameter group), but got ", lr_lambdas_.size());
  for (size_t g = 0; g < lr_lambdas_.size(); ++g) {
    TS_CHECK(lr_lambdas_[g] != nullptr, ValueError, "LambdaLR: lr_lambda ", g, " is empty");
  }
  start(last_epoch);
}

double LambdaLR::get_lr(size_t group, double) const { return base_lrs()[group] * lr_lambdas_[group](last_epoch()); }

}  // namespace tessera::optim
