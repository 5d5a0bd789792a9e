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

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, const GroupNormOptions& options)
    : num_groups_(num_groups), num_channels_(num_channels), options_(options) {
  TS_CHECK(num_groups > 0 && num_channels > 0 && num_channels % num_groups == 0, ValueError, "GroupNorm: ",
           num_channels, " channels do not split into ", num_groups, " groups");
  TS_CHECK(options.eps >= 0, ValueError, "GroupNorm: eps must be non-negative, got ", options.eps);
  if (options.affine) {
    weight = deferred_parameter({num_channels}, init::ones());
    register_parameter("weight", weight);
    bias = deferred_parameter({num_channels}, init::zeros());
    register_parameter("bias", bias);
  }
}

Tensor GroupNorm::forward(Tensor input) {
  TS_CHECK(input.defined() && input.dim() >= 2 && input.size(1) == num_channels_, ShapeError, "GroupNorm '", path(),
           "': expected an input [N, ", num_channels_, ", ...], got ",
           input.defined() ? shape_str(input.sizes()) : "an undefined tensor");
  return group_norm(input, num_groups_, weight, bias, options_.eps);
}

std::string GroupNorm::extra_repr() const {
  std::ostringstream out;
  out << num_groups_ << ", " << num_channels_ << ", eps=" << options_.eps
      << ", affine=" << (options_.affine ? "True" : "False");
  return out.str();
}

}  // namespace tessera::nn
