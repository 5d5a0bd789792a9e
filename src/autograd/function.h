// Recording an op in the autograd graph (flashlight's GradFunc pattern): the forward
// computes with native kernels, then, if any input requires grad, attaches a backward
// closure that captures exactly what it needs. Capture tensors detached (saved()): a
// closure must never hold its own outputs' graph.
//
//   Tensor out = native::unary(UnaryOp::exp, x);
//   if (needs_grad(x)) {
//     record("ExpBackward", {x}, {out}, [y = saved(out)](const TensorList& g) {
//       return TensorList{g[0] * y};
//     });
//   }
#pragma once

#include <initializer_list>

#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/node.h"

namespace tessera::autograd {

// True when grad mode is on and any defined input requires grad.
bool needs_grad(std::initializer_list<Tensor> inputs);
bool needs_grad(const TensorList& inputs);

// A detached alias of `tensor` for a backward closure to keep.
inline Tensor saved(const Tensor& tensor) { return tensor.defined() ? tensor.detach() : Tensor(); }

// Makes a FunctionNode with edges to `inputs` and sets it as the grad_fn of `outputs`.
// `backward` returns one gradient per input (undefined for inputs that need none).
void record(const char* name, const TensorList& inputs, const TensorList& outputs,
            FunctionNode::Backward backward);
// The same for a backward that may reuse its saved buffers on its last use
// (FunctionNode::ReusingBackward: `(const TensorList& g, bool last_use) mutable`).
void record(const char* name, const TensorList& inputs, const TensorList& outputs,
            FunctionNode::ReusingBackward backward);

}  // namespace tessera::autograd
