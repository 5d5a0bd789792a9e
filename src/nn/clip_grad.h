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

}  // namespace tessera::nn
