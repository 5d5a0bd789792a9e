// What every file of differentiable ops here starts from: the recording API
// (autograd/function.h: needs_grad, record, saved, TensorList), the ops' declarations
// (functions.h) and the kernels they record (native.h), with the names all of them use.
// Private to src/autograd/functions/ (not installed).
#pragma once

#include <array>

#include "tessera/autograd/function.h"
#include "tessera/autograd/functions.h"
#include "tessera/tensor/native.h"

namespace tessera {

using autograd::needs_grad;
using autograd::record;
using autograd::saved;
using autograd::TensorList;
using native::BinaryOp;
using native::UnaryOp;

// Which of (input, weight, bias) want a gradient, an undefined weight or bias none: the
// output mask of the normalisations' backward kernels.
inline std::array<bool, 3> grad_mask(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  const auto wants = [](const Tensor& t) { return t.defined() && t.requires_grad(); };
  return {wants(input), wants(weight), wants(bias)};
}

}  // namespace tessera
