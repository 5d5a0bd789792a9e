// Gradient-norm clipping for an unsharded model (FSDP has its own, over shards).
#pragma once

#include <vector>

#include "tessera/tensor/tensor.h"

namespace tessera::nn {

// Scales the gradients of `parameters` so their joint 2-norm is at most max_norm, as
// torch.nn.utils.clip_grad_norm_ (factor min(max_norm / (norm + 1e-6), 1)); returns the
// norm before clipping. The norm is accumulated in double.
//
// A model sharded by fsdp::fully_shard is refused (ValueError naming the parameter): each
// rank holds only its part of every gradient, so the norm here would be this rank's alone,
// and the original parameters hold no gradient at all. Use fsdp::clip_grad_norm(model,
// max_norm), which adds the ranks' squared norms. (NO_SHARD's flat parameters, whole on
// every rank, are accepted.)
double clip_grad_norm(const std::vector<Tensor>& parameters, double max_norm);

// The squared 2-norm of `grad` accumulated in double: a 0-dim float64 tensor on grad's
// device. On the CPU converted and summed in pieces of 64Ki elements that stay in cache, never
// as a float64 copy of the whole gradient (GPT-2's embedding would need two of 300 MB each).
// Both clip_grad_norms use it.
Tensor squared_norm(const Tensor& grad);

}  // namespace tessera::nn
