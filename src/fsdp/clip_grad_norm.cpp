// Gradient-norm clipping over shards: each rank's squared norm, one all-reduce, one scale.
#include <cmath>

#include "tessera/autograd/grad_mode.h"
#include "tessera/fsdp/state.h"
#include "tessera/tensor/native.h"

namespace tessera::fsdp {

double clip_grad_norm(nn::Module& root, double max_norm) {
  detail::FsdpState& state = detail::state_of(root);
  NoGradGuard no_grad;
  // Shards are disjoint and their padding holds zero gradients, so local squared norms
  // add up to the full one. NO_SHARD units hold whole, identical gradients on every rank.
  double local = 0;
  for (auto& unit : state.units()) {
    Tensor grad = unit->shard().grad();
    if (!grad.defined()) continue;
    Tensor g64 = native::to_dtype(grad, DType::f64);
    double sum = native::sum(native::binary(native::BinaryOp::mul, g64, g64), {}, false).item<double>();
    local += unit->sharded() ? sum : sum / state.group().size();
  }
  Tensor total = native::full({}, local, DType::f64, Device::cpu());
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
