#include "tessera/nn/clip_grad.h"

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

double clip_grad_norm(const std::vector<Tensor>& parameters, double max_norm) {
  check_not_sharded(parameters);
  NoGradGuard no_grad;
  double squares = 0;
  for (const Tensor& p : parameters) {
    Tensor grad = p.grad();
    if (!grad.defined()) continue;
    Tensor g64 = native::to_dtype(grad, DType::f64);
    squares += native::sum(native::binary(native::BinaryOp::mul, g64, g64), {}, false).item<double>();
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
