// PyTorch's initialisation rules, as InitRules (values keyed by seed, name, index), and
// torch.nn.init's in-place functions over them.
//
//   ts::nn::MultiheadAttention attn(256, 8);
//   ts::nn::init::xavier_uniform_(attn.in_proj_weight);   // before first use: becomes its rule
//   ts::nn::init::trunc_normal_(head.weight, 0, 0.02, -0.04, 0.04);  // a, b absolute, as PyTorch's
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

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

// xavier_uniform_(w, gain): U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)); xavier_normal_:
// N(0, gain * sqrt(2 / (fan_in + fan_out))).
inline InitRule xavier_uniform(int64_t fan_in, int64_t fan_out, double gain = 1.0) {
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return InitRule::uniform(-bound, bound);
}
inline InitRule xavier_normal(int64_t fan_in, int64_t fan_out, double gain = 1.0) {
  return InitRule::normal(0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)));
}
// trunc_normal_(w, mean, std, a, b): N(mean, std) kept within [a, b] (absolute bounds, as
// PyTorch's).
inline InitRule trunc_normal(double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0) {
  return InitRule::truncated_normal(mean, std, a, b);
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

// (fan_in, fan_out) of a weight [out, in, k...] as PyTorch computes them: in * prod(k) and
// out * prod(k). Throws for fewer than 2 dims, as PyTorch does.
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& weight);

// torch.nn.init's functions: `rule` applied to `tensor`. A parameter not yet materialised
// (deferred) takes it as its rule, so its values stay keyed by (seed, name, index) and
// FSDP ranks draw only their shard; a tensor that holds values is refilled now from the
// default generator (ts::manual_seed), under no-grad. Returns the tensor, as PyTorch's.
Tensor apply_(const Tensor& tensor, const InitRule& rule);
Tensor uniform_(const Tensor& tensor, double a = 0.0, double b = 1.0);
Tensor normal_(const Tensor& tensor, double mean = 0.0, double std = 1.0);
Tensor constant_(const Tensor& tensor, double value);
Tensor zeros_(const Tensor& tensor);
Tensor ones_(const Tensor& tensor);
Tensor xavier_uniform_(const Tensor& tensor, double gain = 1.0);
Tensor xavier_normal_(const Tensor& tensor, double gain = 1.0);
Tensor trunc_normal_(const Tensor& tensor, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0);

}  // namespace tessera::nn::init
