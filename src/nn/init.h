// PyTorch's default initialisation rules, as InitRules (values keyed by seed, name, index).
#pragma once

#include <cmath>
#include <cstdint>

#include "tessera/tensor/random.h"

namespace tessera::nn::init {

// kaiming_uniform_(w, a): U(-b, b) with b = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)).
// PyTorch's Linear and Conv2d use a = sqrt(5), which gives b = 1 / sqrt(fan_in).
inline InitRule kaiming_uniform(int64_t fan_in, double a = std::sqrt(5.0)) {
  double gain = std::sqrt(2.0 / (1.0 + a * a));
  double bound = fan_in > 0 ? gain * std::sqrt(3.0 / static_cast<double>(fan_in)) : 0.0;
  return InitRule::uniform(-bound, bound);
}

// The bias rule of Linear and Conv2d: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
inline InitRule bias_uniform(int64_t fan_in) {
  double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  return InitRule::uniform(-bound, bound);
}

inline InitRule zeros() { return InitRule::constant(0.0); }
inline InitRule ones() { return InitRule::constant(1.0); }

}  // namespace tessera::nn::init
