// Gradient-norm clipping for an unsharded model (FSDP has its own, over shards).
#pragma once

#include <vector>

#include "tessera/tensor/tensor.h"

namespace tessera::nn {

// Scales the gradients of `parameters` so their joint 2-norm is at most max_norm, as
// torch.nn.utils.clip_grad_norm_ (factor min(max_norm / (norm + 1e-6), 1)); returns the
// norm before clipping. The norm is accumulated in double.
double clip_grad_norm(const std::vector<Tensor>& parameters, double max_norm);

}  // namespace tessera::nn
