// The backward engine: runs the graph from some roots to the leaves.
//
// Dependencies are counted by an iterative walk, then ready nodes run latest-created
// first, so backward visits ops in reverse forward order (what FSDP's prefetch assumes)
// and no recursion deepens with the graph: a chain of 100,000 ops is fine.
#pragma once

#include <functional>

#include "tessera/autograd/meta.h"
#include "tessera/autograd/node.h"

namespace tessera::autograd {

void backward(const TensorList& roots, const TensorList& grad_roots, bool retain_graph = false);

// Queues `callback` to run once the backward now running has finished (FSDP uses this to
// finish gradient reduction). Throws when called outside a backward.
void queue_callback(std::function<void()> callback);

// Queues `callback` to run once the outermost backward running on this thread has finished:
// a backward run from inside another one (activation checkpointing's) does not end it.
// FSDP finishes a step's gradient reductions so. Throws when called outside a backward.
void queue_final_callback(std::function<void()> callback);

// True while this thread is running a backward.
bool in_backward();

// Lets `sink` take each gradient of the leaf `leaf` as it arrives, instead of the engine
// holding it until the leaf's last one has come and adding their sum (FSDP adds each into
// its gradient buffer: GPT-2's tied wte then never holds its head's [vocab, dim] gradient
// through the whole backward). Gradients the sink declines take the usual path. A leaf
// with gradient hooks (register_hook) gets no gradient through its sink: hooks see the sum.
// Post-accumulate hooks still run once, when the leaf's last gradient has arrived; .grad
// then holds only what the sink declined (undefined if it took everything).
void set_gradient_sink(const Tensor& leaf, GradientSink sink);

}  // namespace tessera::autograd
