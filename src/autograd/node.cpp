#include "tessera/autograd/node.h"

#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/meta.h"
#include "tessera/tensor/native.h"

namespace tessera::autograd {

namespace {

thread_local uint64_t next_sequence_nr = 0;

// Destroying a long chain of nodes would recurse once per node (each holds the next by
// shared_ptr). Instead, a node's edges are parked here and released in a loop.
void release_iteratively(std::vector<Edge>& edges) {
  thread_local std::vector<std::shared_ptr<Node>> pending;
  thread_local bool draining = false;
  for (Edge& edge : edges) {
    if (edge.node) pending.push_back(std::move(edge.node));
  }
  if (draining) return;
  draining = true;
  while (!pending.empty()) {
    std::shared_ptr<Node> node = std::move(pending.back());
    pending.pop_back();
    node.reset();  // may park more edges
  }
  draining = false;
}

}  // namespace

uint64_t upcoming_sequence_nr() { return next_sequence_nr; }

Node::Node(std::string name) : name_(std::move(name)), sequence_nr_(next_sequence_nr++) {}

Node::~Node() { release_iteratively(next_edges_); }

int Node::add_pre_hook(uint32_t output_nr, GradHook hook) {
  int handle = next_hook_handle_++;
  pre_hooks_.push_back({handle, output_nr, std::move(hook)});
  return handle;
}

void Node::remove_pre_hook(int handle) {
  std::erase_if(pre_hooks_, [handle](const PreHook& h) { return h.handle == handle; });
}

void Node::run_pre_hooks(TensorList& grad_outputs) {
  for (PreHook& h : pre_hooks_) {
    Tensor replacement = h.hook(grad_outputs[h.output_nr]);
    if (replacement.defined()) grad_outputs[h.output_nr] = std::move(replacement);
  }
}

TensorList Node::apply_and_release(TensorList&& grad_outputs) {
  TensorList grads = apply(std::move(grad_outputs));
  release_saved();
  return grads;
}

FunctionNode::FunctionNode(std::string name, Backward backward)
    : Node(std::move(name)),
      backward_([backward = std::move(backward)](const TensorList& grads, bool) { return backward(grads); }) {}

void FunctionNode::check_not_released() const {
  TS_CHECK(!released_, Error, "backward through ", name(),
           " a second time: its saved tensors were freed after the first backward; "
           "pass retain_graph=true to the first backward() to keep them");
}

TensorList FunctionNode::apply(TensorList&& grad_outputs) {
  check_not_released();
  return backward_(grad_outputs, false);
}

TensorList FunctionNode::apply_and_release(TensorList&& grad_outputs) {
  check_not_released();
  TensorList grads = backward_(grad_outputs, true);
  release_saved();
  return grads;
}

void FunctionNode::release_saved() {
  backward_ = nullptr;
  released_ = true;
}

AccumulateGrad::AccumulateGrad(Tensor leaf) : Node("AccumulateGrad"), leaf_(std::move(leaf)) {
  outputs().push_back({leaf_.sizes(), leaf_.dtype(), leaf_.device()});
}

bool owns_its_storage(const Tensor& grad) {
  return grad.impl_ptr().use_count() == 1 && grad.storage().use_count() == 1 && grad.is_contiguous() &&
         grad.storage_offset() == 0 && grad.nbytes() == grad.storage()->nbytes();
}

TensorList AccumulateGrad::apply(TensorList&& grad_outputs) {
  Tensor grad = std::move(grad_outputs[0]);
  AutogradMeta& meta = meta_of(leaf_);
  if (grad.defined()) {  // undefined: the gradient sink took every one
    for (auto& [handle, hook] : meta.hooks) {
      Tensor replacement = hook(grad);
      if (replacement.defined()) grad = std::move(replacement);
    }
    TS_CHECK(grad.sizes() == leaf_.sizes(), ShapeError, "gradient of shape ", shape_str(grad.sizes()),
             " does not match its leaf of shape ", shape_str(leaf_.sizes()));
    NoGradGuard no_grad;
    if (!meta.grad.defined()) {
      meta.grad = owns_its_storage(grad) ? std::move(grad) : native::clone(grad);
    } else {
      native::add_scaled_(meta.grad, grad, 1.0);
    }
  }
  for (PostAccumulateGradHook& hook : meta.post_accumulate_hooks) hook(leaf_);
  return {};
}

bool AccumulateGrad::give_to_sink(const Tensor& grad) {
  AutogradMeta& meta = meta_of(leaf_);
  if (!meta.gradient_sink || !meta.hooks.empty() || !grad.defined() || grad.sizes() != leaf_.sizes()) return false;
  return meta.gradient_sink(grad);
}

Edge gradient_edge(const Tensor& tensor) {
  AutogradMeta* meta = find_meta(tensor);
  if (meta == nullptr) return {};
  if (meta->grad_fn) return {meta->grad_fn, meta->output_nr};
  if (!meta->requires_grad) return {};
  std::shared_ptr<Node> accumulator = meta->grad_accumulator.lock();
  if (!accumulator) {
    accumulator = std::make_shared<AccumulateGrad>(tensor);
    meta->grad_accumulator = accumulator;
  }
  return {accumulator, 0};
}

}  // namespace tessera::autograd
