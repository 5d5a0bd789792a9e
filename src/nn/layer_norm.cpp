#include "tessera/nn/layer_norm.h"

#include <sstream>

#include "tessera/nn/init.h"

namespace tessera::nn {

LayerNorm::LayerNorm(int64_t normalized_shape, const LayerNormOptions& options)
    : LayerNorm(Shape{normalized_shape}, options) {}

LayerNorm::LayerNorm(Shape normalized_shape, const LayerNormOptions& options)
    : normalized_shape_(std::move(normalized_shape)), options_(options) {
  TS_CHECK(!normalized_shape_.empty(), ValueError, "LayerNorm: normalized_shape must have at least one dim");
  for (int64_t size : normalized_shape_) {
    TS_CHECK(size >= 0, ValueError, "LayerNorm: normalized_shape ", shape_str(normalized_shape_),
             " has a negative size");
  }
  TS_CHECK(options.eps >= 0, ValueError, "LayerNorm: eps must be non-negative, got ", options.eps);
  if (options.elementwise_affine) {
    weight = deferred_parameter(normalized_shape_, init::ones());
    register_parameter("weight", weight);
    if (options.bias) {
      bias = deferred_parameter(normalized_shape_, init::zeros());
      register_parameter("bias", bias);
    }
  }
}

Tensor LayerNorm::forward(Tensor input) { return layer_norm(input, normalized_shape_, weight, bias, options_.eps); }

std::string LayerNorm::extra_repr() const {
  // As PyTorch prints it: the shape as a Python tuple.
  std::ostringstream out;
  out << "(";
  for (size_t i = 0; i < normalized_shape_.size(); ++i) out << (i > 0 ? ", " : "") << normalized_shape_[i];
  out << (normalized_shape_.size() == 1 ? ",)" : ")") << ", eps=" << options_.eps
      << ", elementwise_affine=" << (options_.elementwise_affine ? "True" : "False");
  return out.str();
}

}  // namespace tessera::nn
