#include "tessera/nn/activation.h"

namespace tessera::nn {

std::string GELU::extra_repr() const { return detail::concat("approximate='", gelu_approximate_name(approximate_), "'"); }

std::string AlongDim::extra_repr() const { return detail::concat("dim=", dim_); }

}  // namespace tessera::nn
