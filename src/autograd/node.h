// A node of the backward graph: computes the gradients of an op's inputs from the
// gradients of its outputs. Nodes point to the nodes of their inputs (next_edges); leaves
// that require grad end in an AccumulateGrad node, which adds into their .grad.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/tensor/tensor.h"

namespace tessera::autograd {

using TensorList = std::vector<Tensor>;

class Node;

struct Edge {
  std::shared_ptr<Node> node;  // null: the input needs no gradient
  uint32_t input_nr = 0;       // which output of `node` this edge feeds
};

struct OutputInfo {
  Shape shape;
  DType dtype;
  Device device;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  explicit Node(std::string name);
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Gradients of the inputs (one per next edge; undefined where none) from the gradients of
  // the outputs (one per output, zero-filled by the engine where none arrived).
  virtual TensorList apply(TensorList&& grad_outputs) = 0;
  // Frees what the forward saved, after a backward without retain_graph.
  virtual void release_saved() {}
  // apply() for the last time (a backward without retain_graph), then release_saved(): a
  // node may reuse what it saved as its gradients' memory.
  virtual TensorList apply_and_release(TensorList&& grad_outputs);
  // Takes `grad` for a leaf past the engine's buffers, into the leaf's gradient sink
  // (set_gradient_sink): true when it did. Only a leaf's AccumulateGrad can; the engine asks
  // every node an edge reaches, which one virtual call answers (no type test per edge).
  virtual bool give_to_sink(const Tensor& /*grad*/) { return false; }

  const std::string& name() const { return name_; }
  // Creation order; the engine runs ready nodes latest-first, i.e. in reverse forward order.
  uint64_t sequence_nr() const { return sequence_nr_; }
  std::vector<Edge>& next_edges() { return next_edges_; }
  const std::vector<Edge>& next_edges() const { return next_edges_; }
  std::vector<OutputInfo>& outputs() { return outputs_; }

  // A hook on the gradient of output `output_nr`, run before apply(); this is what
  // Tensor::register_hook means for a non-leaf tensor.
  int add_pre_hook(uint32_t output_nr, GradHook hook);
  void remove_pre_hook(int handle);
  void run_pre_hooks(TensorList& grad_outputs);

 private:
  struct PreHook {
    int handle;
    uint32_t output_nr;
    GradHook hook;
  };
  std::string name_;
  uint64_t sequence_nr_;
  std::vector<Edge> next_edges_;
  std::vector<OutputInfo> outputs_;
  std::vector<PreHook> pre_hooks_;
  int next_hook_handle_ = 0;
};

// The node behind an op: the backward closure captures exactly what it needs (detached).
class FunctionNode final : public Node {
 public:
  using Backward = std::function<TensorList(const TensorList& grad_outputs)>;
  // A backward told whether it runs for the last time (`last_use`: no retain_graph, what it
  // captured is freed right after), so that it may write its gradient into a saved buffer
  // nobody else holds (a mutable closure moving it out) instead of allocating one.
  using ReusingBackward = std::function<TensorList(const TensorList& grad_outputs, bool last_use)>;
  FunctionNode(std::string name, Backward backward);
  FunctionNode(std::string name, ReusingBackward backward) : Node(std::move(name)), backward_(std::move(backward)) {}
  TensorList apply(TensorList&& grad_outputs) override;
  TensorList apply_and_release(TensorList&& grad_outputs) override;
  void release_saved() override;

 private:
  void check_not_released() const;
  ReusingBackward backward_;
  bool released_ = false;
};

// Adds incoming gradients into a leaf's .grad, then runs its post-accumulate hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf);
  TensorList apply(TensorList&& grad_outputs) override;
  const Tensor& leaf() const { return leaf_; }
  // Hands `grad` to the leaf's gradient sink if it has one and no gradient hooks; true when
  // the sink took it.
  bool give_to_sink(const Tensor& grad) override;

 private:
  Tensor leaf_;
};

// The sequence number the next node made on this thread will get: nodes numbered below it
// existed before (activation checkpointing tells its recomputed graph from the rest so).
uint64_t upcoming_sequence_nr();

// True for a gradient the engine may keep or add into without copying: contiguous, owning
// its whole storage, and referenced by nobody else.
bool owns_its_storage(const Tensor& grad);

// The edge through which a gradient reaches `tensor`: its grad_fn, or for a leaf that
// requires grad its AccumulateGrad; an empty edge otherwise.
Edge gradient_edge(const Tensor& tensor);

}  // namespace tessera::autograd
