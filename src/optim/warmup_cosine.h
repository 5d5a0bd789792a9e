// nanoGPT's learning-rate schedule (its train.py get_lr): a linear warmup over
// warmup_steps, then a cosine decay from lr to min_lr at decay_steps, min_lr after:
//
//   step <  warmup_steps:  lr * (step + 1) / (warmup_steps + 1)
//   step >  decay_steps:   min_lr
//   otherwise:             min_lr + 0.5 (1 + cos(pi r)) (lr - min_lr),
//                          r = (step - warmup_steps) / (decay_steps - warmup_steps)
//
// As a LambdaLR factor (the rate divided by lr), so it runs through the scheduler API,
// checkpoints and all; computed as Python computes it (no fused multiply-adds), so the
// rates equal those of torch's LambdaLR over nanoGPT's function bit for bit.
//
//   ts::optim::LambdaLR schedule(adamw, ts::optim::warmup_cosine({.lr = 6e-4, .min_lr = 6e-5,
//                                                                  .warmup_steps = 2000, .decay_steps = 600000}));
#pragma once

#include <cstdint>

#include "tessera/optim/lambda_lr.h"

namespace tessera::optim {

struct WarmupCosineOptions {
  double lr = 6e-4;  // the optimizer's (base) rate, reached at the end of the warmup
  double min_lr = 6e-5;
  int64_t warmup_steps = 2000;
  int64_t decay_steps = 600000;  // nanoGPT's lr_decay_iters, usually the run's length
};

// nanoGPT's get_lr(step). ValueError for negative steps or decay_steps < warmup_steps.
double warmup_cosine_lr(int64_t step, const WarmupCosineOptions& options);
// step -> warmup_cosine_lr(step) / lr, for LambdaLR.
LambdaLR::Lambda warmup_cosine(const WarmupCosineOptions& options);

}  // namespace tessera::optim
