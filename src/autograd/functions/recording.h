// What every file of differentiable ops here starts from: the recording API
// (autograd/function.h: needs_grad, record, saved, TensorList), the ops' declarations
// (functions.h) and the kernels they record (native.h), with the names all of them use,
// and the recording shapes several ops share (record_unary, record_normalization).
// Private to src/autograd/functions/ (not installed).
#pragma once

#include <array>
#include <utility>

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

// As record() (callers check needs_grad first, so that a closure's captures are made only
// when it is recorded), for the shapes several ops share.

// A one-input op: `backward(grad)` maps the gradient of `out` to that of x.
template <class Backward>
void record_unary(const char* name, const Tensor& x, const Tensor& out, Backward backward) {
  record(name, {x}, {out},
         [backward = std::move(backward)](const TensorList& g) { return TensorList{backward(g[0])}; });
}

// A normalisation of (input, weight, bias) into `out` (batch_norm, layer_norm):
// `backward(grad, mask)` is its backward kernel, returning the three gradients for the
// output mask of which want one (an undefined weight or bias none).
template <class Backward>
void record_normalization(const char* name, const Tensor& input, const Tensor& weight, const Tensor& bias,
                          const Tensor& out, Backward backward) {
  const auto wants = [](const Tensor& t) { return t.defined() && t.requires_grad(); };
  const std::array<bool, 3> mask{wants(input), wants(weight), wants(bias)};
  record(name, {input, weight, bias}, {out}, [backward = std::move(backward), mask](const TensorList& g) {
    auto [grad_input, grad_weight, grad_bias] = backward(g[0], mask);
    return TensorList{grad_input, grad_weight, grad_bias};
  });
}

}  // namespace tessera
