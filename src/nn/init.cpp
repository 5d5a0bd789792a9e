#include "tessera/nn/init.h"

#include "tessera/autograd/grad_mode.h"
#include "tessera/tensor/factory.h"

namespace tessera::nn::init {

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& weight) {
  TS_CHECK(weight.defined() && weight.dim() >= 2, ShapeError,
           "fan_in_and_fan_out: needs a tensor of at least 2 dims, got ",
           weight.defined() ? shape_str(weight.sizes()) : std::string("an undefined tensor"));
  int64_t receptive = 1;
  for (int64_t d = 2; d < weight.dim(); ++d) receptive *= weight.size(d);
  return {weight.size(1) * receptive, weight.size(0) * receptive};
}

Tensor apply_(const Tensor& tensor, const InitRule& rule) {
  TS_CHECK(tensor.defined(), ValueError, "nn::init: the tensor is undefined");
  TS_CHECK(is_floating(tensor.dtype()), DTypeError, "nn::init: expected a floating tensor, got ",
           dtype_name(tensor.dtype()));
  if (PendingInit* pending = tensor.storage()->pending(); pending != nullptr) {
    pending->rule = rule;
    return tensor;
  }
  // Drawn on the host in the tensor's dtype, then copied in (any device, any strides).
  Tensor values = empty(tensor.sizes(), {.dtype = tensor.dtype()});
  with_default_generator([&](Generator& generator) {
    const uint64_t first = generator.advance(static_cast<uint64_t>(values.numel()));
    rule.fill_from(values.data_ptr(), values.dtype(), values.numel(), generator.seed(), generator.stream(), first);
  });
  NoGradGuard no_grad;
  Tensor target = tensor;
  target.copy_(values);
  return tensor;
}

Tensor uniform_(const Tensor& tensor, double a, double b) { return apply_(tensor, InitRule::uniform(a, b)); }
Tensor normal_(const Tensor& tensor, double mean, double std) { return apply_(tensor, InitRule::normal(mean, std)); }
Tensor constant_(const Tensor& tensor, double value) { return apply_(tensor, InitRule::constant(value)); }
Tensor zeros_(const Tensor& tensor) { return constant_(tensor, 0.0); }
Tensor ones_(const Tensor& tensor) { return constant_(tensor, 1.0); }

Tensor xavier_uniform_(const Tensor& tensor, double gain) {
  const auto [fan_in, fan_out] = fan_in_and_fan_out(tensor);
  return apply_(tensor, xavier_uniform(fan_in, fan_out, gain));
}

Tensor xavier_normal_(const Tensor& tensor, double gain) {
  const auto [fan_in, fan_out] = fan_in_and_fan_out(tensor);
  return apply_(tensor, xavier_normal(fan_in, fan_out, gain));
}

Tensor trunc_normal_(const Tensor& tensor, double mean, double std, double a, double b) {
  return apply_(tensor, trunc_normal(mean, std, a, b));
}

}  // namespace tessera::nn::init
