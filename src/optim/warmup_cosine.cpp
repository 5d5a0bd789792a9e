#include "tessera/optim/warmup_cosine.h"

#include <cmath>
#include <numbers>

#include "tessera/tensor/error.h"

namespace tessera::optim {

namespace {

void check(const WarmupCosineOptions& o) {
  TS_CHECK(o.lr > 0 && o.min_lr >= 0, ValueError, "warmup_cosine: lr must be positive and min_lr non-negative, got ",
           o.lr, " and ", o.min_lr);
  TS_CHECK(o.warmup_steps >= 0 && o.decay_steps >= o.warmup_steps, ValueError,
           "warmup_cosine: need 0 <= warmup_steps <= decay_steps, got ", o.warmup_steps, " and ", o.decay_steps);
}

}  // namespace

double warmup_cosine_lr(int64_t step, const WarmupCosineOptions& o) {
  TS_CHECK(step >= 0, ValueError, "warmup_cosine_lr: step must be non-negative, got ", step);
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps + 1);
  if (step > o.decay_steps) return o.min_lr;
  if (o.decay_steps == o.warmup_steps) return o.lr;  // no decay phase: nanoGPT would divide by zero
  const double ratio = static_cast<double>(step - o.warmup_steps) / static_cast<double>(o.decay_steps - o.warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return o.min_lr + coeff * (o.lr - o.min_lr);
}

LambdaLR::Lambda warmup_cosine(const WarmupCosineOptions& options) {
  check(options);
  return [options](int64_t step) { return warmup_cosine_lr(step, options) / options.lr; };
}

}  // namespace tessera::optim
