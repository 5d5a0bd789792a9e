#include "tessera/nn/clip_grad.h"

#include <algorithm>
#include <cmath>

#include "tessera/autograd/grad_mode.h"
#include "tessera/nn/sharded_parameter.h"
#include "tessera/tensor/native.h"

namespace tessera::nn {

namespace {

void check_not_sharded(const std::vector<Tensor>& parameters) {
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Tensor& p = parameters[i];
    const FlatShard* flat = find_flat_shard(p);
    const ShardedParameter* original = find_sharded_parameter(p);
    if ((flat == nullptr || !flat->sharded) && original == nullptr) continue;
    const std::string what = flat != nullptr ? "the flat shard '" + flat->name + "'"
                                             : "the original parameter '" + original->name + "'";
    throw ValueError(detail::concat(
        "nn::clip_grad_norm: parameter ", i, " is ", what, " of a model sharded by fsdp::fully_shard; each rank ",
        "holds only its part of the gradients, so this norm would be one rank's. Call ",
        "fsdp::clip_grad_norm(model, max_norm), which combines the ranks' norms"));
  }
}

}  // namespace

Tensor squared_norm(const Tensor& grad) {
  const Tensor flat = native::view(native::contiguous(grad), {grad.numel()});
  // A GPU has the memory and wants few, large kernels: one piece there.
  const int64_t piece_size = grad.is_cuda() ? std::max<int64_t>(flat.numel(), 1) : int64_t{1} << 16;
  Tensor total = native::zeros({}, DType::f64, grad.device());
  for (int64_t start = 0; start < flat.numel(); start += piece_size) {
    Tensor piece = native::to_dtype(native::narrow(flat, 0, start, std::min(piece_size, flat.numel() - start)), DType::f64);
    native::add_scaled_(total, native::sum(native::binary(native::BinaryOp::mul, piece, piece), {}, false), 1.0);
  }
  return total;
}

double clip_grad_norm(const std::vector<Tensor>& parameters, double max_norm) {
  check_not_sharded(parameters);
  NoGradGuard no_grad;
  double squares = 0;
  for (const Tensor& p : parameters) {
    Tensor grad = p.grad();
    if (!grad.defined()) continue;
    squares += squared_norm(grad).item<double>();
  }
  double norm = std::sqrt(squares);
  double scale = std::min(max_norm / (norm + 1e-6), 1.0);
  for (const Tensor& p : parameters) {
    Tensor grad = p.grad();
    if (grad.defined()) native::binary_(native::BinaryOp::mul, grad, scale);
  }
  return norm;
}

}  // namespace tessera::nn
