// PyTorch's default initialisation rules, as InitRules (values keyed by seed, name, index).
#pragma once

#include <cmath>
#include <cstdint>

#include "tessera/tensor/error.h"
#include "tessera/tensor/random.h"
#include "tessera/tensor/storage.h"
#include "tessera/tensor/tensor.h"

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

// kaiming_normal_(w, mode, nonlinearity="relu"): N(0, sqrt(2 / fan)), with fan the fan_in
// or fan_out that `mode` names (torchvision's ResNet uses fan_out = out_channels * kh * kw).
inline InitRule kaiming_normal(int64_t fan) {
  return InitRule::normal(0.0, fan > 0 ? std::sqrt(2.0 / static_cast<double>(fan)) : 0.0);
}

inline InitRule zeros() { return InitRule::constant(0.0); }
inline InitRule ones() { return InitRule::constant(1.0); }

// Gives a parameter that has no values yet (never used, loaded or sharded) another rule:
// how a model replaces its layers' default initialisation, as torchvision calls nn.init on
// its modules. Values stay keyed by (seed, parameter name, element index).
inline void set_init_rule(const Tensor& parameter, const InitRule& rule) {
  PendingInit* pending = parameter.defined() ? parameter.storage()->pending() : nullptr;
  TS_CHECK(pending != nullptr, ValueError,
           "set_init_rule: the parameter already holds values (it was used, loaded or sharded); set its rule before");
  pending->rule = rule;
}

}  // namespace tessera::nn::init
