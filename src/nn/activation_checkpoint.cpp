// Activation checkpointing: the forward without a graph, a node that recomputes in backward.
//
// The node's backward runs the call again with grad mode on (on a detached copy of the
// input that requires grad when the input does), then an inner backward from the recomputed
// output with the incoming gradient: parameter gradients accumulate as in any backward (and
// their hooks, FSDP's reductions, run), and the input's gradient is what the node returns.
// Dropout keys: each checkpointed call has a log; its first forward records every key any
// Dropout inside takes, its recomputation replays them in order. Logs nest (a checkpoint
// inside a checkpointed call records what the outer one replays).
#include "tessera/nn/activation_checkpoint.h"

#include <memory>
#include <unordered_set>
#include <vector>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/function.h"
#include "tessera/autograd/meta.h"

namespace tessera::nn {

namespace {

struct DropoutKeyLog {
  std::vector<DropoutKey> keys;
  size_t replayed = 0;
  bool replaying = false;
  DropoutKeyLog* parent = nullptr;
};

thread_local DropoutKeyLog* current_log = nullptr;
thread_local int recomputations = 0;

// Makes `log` the current one (recording, or replaying from its start) for its lifetime.
class LogScope {
 public:
  LogScope(DropoutKeyLog& log, bool replaying) : log_(log), previous_(current_log) {
    log.parent = previous_;
    log.replaying = replaying;
    log.replayed = 0;
    current_log = &log;
    if (replaying) ++recomputations;
  }
  ~LogScope() {
    if (log_.replaying) --recomputations;
    current_log = previous_;
  }
  LogScope(const LogScope&) = delete;
  LogScope& operator=(const LogScope&) = delete;

 private:
  DropoutKeyLog& log_;
  DropoutKeyLog* previous_;
};

DropoutKey key_from(DropoutKeyLog* log, const std::function<DropoutKey()>& fresh) {
  if (log == nullptr) return fresh();
  if (log->replaying) {
    TS_CHECK(log->replayed < log->keys.size(), Error, "checkpoint: the recomputation drew more dropout masks (",
             log->replayed + 1, ") than the first forward (", log->keys.size(),
             "); a checkpointed function must run the same ops every time it is called");
    return log->keys[log->replayed++];
  }
  DropoutKey key = key_from(log->parent, fresh);
  log->keys.push_back(key);
  return key;
}

// The recomputed graph must end at leaves and at the recomputation's own input: a node made
// before the recomputation began belongs to the outer graph, which the inner backward would
// run early, and again later.
void check_graph_is_inner(const Tensor& output, uint64_t first_inner) {
  std::vector<autograd::Node*> stack;
  std::unordered_set<autograd::Node*> seen;
  if (autograd::AutogradMeta* meta = autograd::find_meta(output); meta != nullptr && meta->grad_fn) {
    stack.push_back(meta->grad_fn.get());
  }
  while (!stack.empty()) {
    autograd::Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    if (dynamic_cast<autograd::AccumulateGrad*>(node) != nullptr) continue;
    TS_CHECK(node->sequence_nr() >= first_inner, ValueError, "checkpoint: the checkpointed function uses a tensor "
             "computed outside it that needs a gradient (made by ", node->name(),
             "); pass it as the function's input, or compute it inside");
    for (const autograd::Edge& edge : node->next_edges()) {
      if (edge.node) stack.push_back(edge.node.get());
    }
  }
}

}  // namespace

bool is_recomputing() { return recomputations > 0; }

DropoutKey checkpointed_dropout_key(const std::function<DropoutKey()>& fresh) { return key_from(current_log, fresh); }

Tensor checkpoint(const CheckpointFunction& function, const Tensor& input) {
  TS_CHECK(function != nullptr, ValueError, "checkpoint: no function given");
  if (!GradMode::is_enabled()) return function(input);
  auto log = std::make_shared<DropoutKeyLog>();
  Tensor output;
  {
    NoGradGuard no_grad;
    LogScope record(*log, false);
    output = function(input);
  }
  TS_CHECK(output.defined(), ValueError, "checkpoint: the function returned an undefined tensor");
  TS_CHECK(is_floating(output.dtype()), DTypeError, "checkpoint: the function returned a ", dtype_name(output.dtype()),
           " tensor; only floating outputs carry gradients");
  const bool input_requires_grad = input.defined() && input.requires_grad();
  autograd::record("CheckpointBackward", {input}, {output},
                   [function, log, saved = autograd::saved(input), input_requires_grad](const autograd::TensorList& grads) {
                     Tensor x = saved.defined() ? saved.detach() : Tensor();
                     if (input_requires_grad) x.requires_grad_(true);
                     const uint64_t first_inner = autograd::upcoming_sequence_nr();
                     Tensor recomputed;
                     {
                       EnableGradGuard grad_mode;
                       LogScope replay(*log, true);
                       recomputed = function(x);
                       TS_CHECK(log->replayed == log->keys.size(), Error, "checkpoint: the recomputation drew ",
                                log->replayed, " dropout masks, the first forward ", log->keys.size(),
                                "; a checkpointed function must run the same ops every time it is called");
                     }
                     TS_CHECK(recomputed.defined() && recomputed.sizes() == grads[0].sizes(), ShapeError,
                              "checkpoint: the recomputed output has shape ",
                              recomputed.defined() ? shape_str(recomputed.sizes()) : std::string("(undefined)"),
                              ", the first forward's ", shape_str(grads[0].sizes()));
                     if (recomputed.requires_grad()) {
                       check_graph_is_inner(recomputed, first_inner);
                       autograd::backward({recomputed}, {grads[0]});
                     }
                     return autograd::TensorList{input_requires_grad ? x.grad() : Tensor()};
                   });
  return output;
}

Tensor checkpoint(Module& module, const Tensor& input) {
  return checkpoint([&module](Tensor x) { return module(std::move(x)); }, input);
}

int apply_activation_checkpointing(Module& root, const std::function<bool(Module&)>& check) {
  TS_CHECK(check != nullptr, ValueError, "apply_activation_checkpointing: no check function given");
  int wrapped = 0;
  std::unordered_set<Module*> covered;  // descendants of a wrapped module
  for (Module* module : root.modules()) {  // parents before children
    if (covered.count(module)) {
      for (Module* child : module->children()) covered.insert(child);
      continue;
    }
    if (!check(*module)) {
      // Checkpointed by an earlier call: what it contains is covered.
      if (module->has_call_wrapper()) {
        for (Module* child : module->children()) covered.insert(child);
      }
      continue;
    }
    TS_CHECK(!module->has_call_wrapper(), ValueError, "apply_activation_checkpointing: ", module->type_name(), " '",
             module->path(), "' already has a call wrapper (is it checkpointed already?)");
    module->set_call_wrapper([](Module&, Tensor input, const std::function<Tensor(Tensor)>& call) {
      return checkpoint(call, input);
    });
    ++wrapped;
    for (Module* child : module->children()) covered.insert(child);
  }
  return wrapped;
}

}  // namespace tessera::nn
