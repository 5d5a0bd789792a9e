// Activation checkpointing (torch.utils.checkpoint, and PyTorch's
// apply_activation_checkpointing): a checkpointed call keeps only its input; its forward
// runs without recording the graph, so every activation inside is freed at once, and its
// backward runs the call again with the graph on and back-propagates through that.
//
//   x = ts::nn::checkpoint(block, x);                       // one call
//   ts::nn::apply_activation_checkpointing(model, [](ts::nn::Module& m) {
//     return m.type_name() == "Block";                      // every Block, wherever it is called
//   });
//
// Exact: the recomputation computes the same ops on the same input, and the dropout masks
// it draws are the ones the first forward drew (each Dropout's keys are recorded in forward
// and replayed, whatever BatchScope is current at backward), so losses and gradients are
// bit-identical with checkpointing on or off. BatchNorm2d does not update its running
// statistics a second time while recomputing.
//
// Under FSDP (fsdp::FullyShardOptions::activation_checkpointing, or this on a sharded
// model) a checkpointed unit is gathered for its first forward and freed after it as
// usual; in backward it is gathered again before the recomputation (prefetched by the
// unit after it), stays gathered through the recomputation and its backward, and is freed
// once its gradients are reduced. So at most one block's activations exist at a time.
//
// The function's only differentiable input is `input`: any other tensor it reads that
// needs a gradient must be a leaf (a parameter). Reading a tensor computed outside it
// (captured in a lambda) is an error at backward, naming the op, since the recomputed graph
// would reach the outer graph. Backward through a checkpoint runs once (no retain_graph).
#pragma once

#include <functional>

#include "tessera/nn/module.h"
#include "tessera/autograd/functions.h"

namespace tessera::nn {

using CheckpointFunction = std::function<Tensor(Tensor)>;

// `function(input)` checkpointed. Without grad mode it is just the call.
Tensor checkpoint(const CheckpointFunction& function, const Tensor& input);
// `module(input)` checkpointed: its forward hooks run in both passes.
Tensor checkpoint(Module& module, const Tensor& input);

// Makes every call of each module in `root`'s tree (root included) for which `check` is
// true a checkpointed call (Module::set_call_wrapper). A module inside another checkpointed
// one is left alone: the outer recomputation covers it. Returns how many were wrapped.
int apply_activation_checkpointing(Module& root, const std::function<bool(Module&)>& check);

// True while a checkpointed call is being recomputed on this thread (FSDP's hooks and
// BatchNorm2d read it).
bool is_recomputing();

// For Dropout::next_key(): `fresh()` normally; inside a checkpointed call, `fresh()`
// recorded in forward and the recorded key again when recomputing. (Not in a namespace
// `detail`: nn's own code calls tessera::detail.)
DropoutKey checkpointed_dropout_key(const std::function<DropoutKey()>& fresh);

}  // namespace tessera::nn
