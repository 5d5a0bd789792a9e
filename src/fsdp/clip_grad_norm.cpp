// Gradient-norm clipping over shards: each rank's squared norm, one all-reduce, one scale.
#include <cmath>

#include "tessera/autograd/grad_mode.h"
#include "tessera/fsdp/state.h"
#include "tessera/nn/clip_grad.h"
#include "tessera/tensor/native.h"

namespace tessera::fsdp {

double clip_grad_norm(nn::Module& root, double max_norm) {
  detail::FsdpState& state = detail::state_of(root);
  NoGradGuard no_grad;
  // Shards are disjoint and their padding holds zero gradients, so local squared norms
  // add up to the full one. NO_SHARD units hold whole, identical gradients on every rank.
  // The sum stays on the shards' device (an NCCL group carries CUDA tensors only) and is
  // read once, after the all-reduce. With CPU offload the gradients are on the host: each
  // unit's sum moves to the device for the all-reduce.
  const Device device = state.units().empty() ? Device::cpu() : state.units().front()->device();
  Tensor total = native::zeros({}, DType::f64, device);
  for (auto& unit : state.units()) {
    Tensor grad = unit->shard().grad();
    if (!grad.defined()) continue;
    Tensor sum = nn::squared_norm(grad);
    if (sum.device() != device) sum = native::to_device(sum, device);
    if (!unit->sharded()) sum = native::binary(native::BinaryOp::div, sum, static_cast<double>(state.group().size()));
    native::add_scaled_(total, sum, 1.0);
  }
  state.group().all_reduce(total, dist::ReduceOp::sum);
  double norm = std::sqrt(total.item<double>());
  // torch.nn.utils.clip_grad_norm_: multiply by min(max_norm / (norm + 1e-6), 1).
  double scale = std::min(max_norm / (norm + 1e-6), 1.0);
  for (auto& unit : state.units()) {
    Tensor grad = unit->shard().grad();
    if (grad.defined()) native::binary_(native::BinaryOp::mul, grad, scale);
  }
  return norm;
}

}  // namespace tessera::fsdp
