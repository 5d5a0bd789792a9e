#include "tessera/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/meta.h"
#include "tessera/tensor/native.h"

namespace tessera::autograd {

namespace {

struct GraphTask {
  std::vector<std::function<void()>> callbacks;
};

thread_local GraphTask* current_task = nullptr;
thread_local GraphTask* outermost_task = nullptr;

// Sets current_task (and, for a backward not inside another, outermost_task) for the
// duration of one backward and clears them even on error.
class TaskScope {
 public:
  explicit TaskScope(GraphTask* task) : previous_(current_task) {
    current_task = task;
    if (previous_ == nullptr) outermost_task = task;
  }
  ~TaskScope() {
    current_task = previous_;
    if (previous_ == nullptr) outermost_task = nullptr;
  }

 private:
  GraphTask* previous_;
};

std::unordered_map<Node*, int> count_dependencies(const std::vector<Node*>& roots) {
  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<Node*, bool> seen;
  std::vector<Node*> stack;
  for (Node* root : roots) {
    // A node may be the root several times (several outputs of one op, e.g. split's
    // pieces): walking it twice would count its inputs' dependencies twice.
    if (!seen[root]) stack.push_back(root);
    seen[root] = true;
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next_edges()) {
      Node* next = edge.node.get();
      if (next == nullptr) continue;
      ++dependencies[next];
      if (!seen[next]) {
        seen[next] = true;
        stack.push_back(next);
      }
    }
  }
  return dependencies;
}

// Sums a node's incoming gradients. In place when the sum so far is a buffer nobody else
// holds (as PyTorch's InputBuffer does): a weight used twice (GPT-2's tied embedding and
// head) then needs one gradient buffer, not three. The same values either way (a + b).
void accumulate(Tensor& slot, Tensor&& grad) {
  if (!grad.defined()) return;
  if (!slot.defined()) {
    slot = std::move(grad);
  } else if (owns_its_storage(slot) && slot.sizes() == grad.sizes() && slot.dtype() == grad.dtype() &&
             slot.device() == grad.device()) {
    native::binary_(native::BinaryOp::add, slot, grad);
  } else {
    slot = native::binary(native::BinaryOp::add, slot, grad);
  }
}

struct LaterFirst {
  bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

// Each root's gradient (given, or 1 for a one-element root) in its node's input buffer; the
// roots' nodes, in the order given.
std::vector<std::shared_ptr<Node>> seed_root_gradients(const TensorList& roots, const TensorList& grad_roots,
                                                       std::unordered_map<Node*, TensorList>& buffers) {
  std::vector<std::shared_ptr<Node>> root_nodes;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    Edge edge = gradient_edge(root);
    TS_CHECK(edge.node != nullptr, ValueError, "backward: ", root.str(),
             " does not require grad and has no grad_fn");
    Tensor grad = grad_roots[i];
    if (!grad.defined()) {
      TS_CHECK(root.numel() == 1, ValueError, "backward: a gradient can be created implicitly only for a "
               "one-element output, got ", root.str(), "; pass the gradient");
      grad = native::full(root.sizes(), 1.0, root.dtype(), root.device());
    }
    TS_CHECK(grad.sizes() == root.sizes(), ShapeError, "backward: gradient of shape ", shape_str(grad.sizes()),
             " does not match output of shape ", shape_str(root.sizes()));
    TensorList& buffer = buffers[edge.node.get()];
    buffer.resize(std::max<size_t>(edge.node->outputs().size(), edge.input_nr + 1));
    accumulate(buffer[edge.input_nr], std::move(grad));
    root_nodes.push_back(edge.node);
  }
  return root_nodes;
}

}  // namespace

void backward(const TensorList& roots, const TensorList& grad_roots, bool retain_graph) {
  TS_CHECK(roots.size() == grad_roots.size(), ValueError, "backward: ", roots.size(), " roots but ",
           grad_roots.size(), " gradients");
  GraphTask task;
  TaskScope scope(&task);
  NoGradGuard no_grad;  // backward closures compute plain gradients

  std::unordered_map<Node*, TensorList> buffers;
  std::vector<std::shared_ptr<Node>> root_nodes = seed_root_gradients(roots, grad_roots, buffers);

  std::vector<Node*> root_pointers;
  for (auto& node : root_nodes) root_pointers.push_back(node.get());
  std::unordered_map<Node*, int> dependencies = count_dependencies(root_pointers);

  // Leaves whose gradient sink took some of their gradients: an empty slot there means
  // "all arrived", not "none", and gets no zeros.
  std::unordered_set<Node*> given_to_sink;

  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, LaterFirst> ready;
  std::unordered_map<Node*, bool> queued;
  for (auto& node : root_nodes) {
    if (dependencies[node.get()] == 0 && !queued[node.get()]) {
      queued[node.get()] = true;
      ready.push(node);
    }
  }

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    TensorList grads = std::move(buffers[node.get()]);
    buffers.erase(node.get());
    grads.resize(node->outputs().size());
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined() && !given_to_sink.contains(node.get())) {
        const OutputInfo& info = node->outputs()[i];
        grads[i] = native::zeros(info.shape, info.dtype, info.device);
      }
    }
    node->run_pre_hooks(grads);
    TensorList input_grads =
        retain_graph ? node->apply(std::move(grads)) : node->apply_and_release(std::move(grads));
    grads = TensorList();  // the outputs' gradients are spent: free them before the inputs' are passed on

    std::vector<Edge>& edges = node->next_edges();
    TS_CHECK(input_grads.size() == edges.size() || input_grads.empty(), Error, node->name(), " returned ",
             input_grads.size(), " gradients for ", edges.size(), " inputs");
    for (size_t i = 0; i < edges.size(); ++i) {
      Node* next = edges[i].node.get();
      if (next == nullptr) continue;
      if (!input_grads.empty() && next->give_to_sink(input_grads[i])) {
        given_to_sink.insert(next);
        input_grads[i] = Tensor();
      } else if (!input_grads.empty()) {
        TensorList& buffer = buffers[next];
        buffer.resize(std::max<size_t>(next->outputs().size(), edges[i].input_nr + 1));
        accumulate(buffer[edges[i].input_nr], std::move(input_grads[i]));
      }
      if (--dependencies[next] == 0) ready.push(edges[i].node);
    }
  }

  // Callbacks may queue further callbacks; run until none are left.
  for (size_t i = 0; i < task.callbacks.size(); ++i) {
    std::function<void()> callback = std::move(task.callbacks[i]);
    callback();
  }
}

void queue_callback(std::function<void()> callback) {
  TS_CHECK(current_task != nullptr, Error, "queue_callback: no backward is running on this thread");
  current_task->callbacks.push_back(std::move(callback));
}

void queue_final_callback(std::function<void()> callback) {
  TS_CHECK(outermost_task != nullptr, Error, "queue_final_callback: no backward is running on this thread");
  outermost_task->callbacks.push_back(std::move(callback));
}

bool in_backward() { return current_task != nullptr; }

void set_gradient_sink(const Tensor& leaf, GradientSink sink) {
  TS_CHECK(leaf.defined() && leaf.requires_grad() && leaf.is_leaf(), ValueError,
           "set_gradient_sink needs a leaf that requires grad, got ", leaf.defined() ? leaf.str() : "undefined");
  meta_of(leaf).gradient_sink = std::move(sink);
}

}  // namespace tessera::autograd
