// The backward engine: runs the graph from some roots to the leaves.
//
// Dependencies are counted by an iterative walk, then ready nodes run latest-created
// first, so backward visits ops in reverse forward order (what FSDP's prefetch assumes)
// and no recursion deepens with the graph: a chain of 100,000 ops is fine.
#pragma once

#include <functional>

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

}  // namespace tessera::autograd
