#include "tessera/autograd/function.h"

#include "tessera/autograd/meta.h"

namespace tessera {

namespace {
thread_local bool grad_enabled = true;
}  // namespace

bool GradMode::is_enabled() { return grad_enabled; }
void GradMode::set_enabled(bool enabled) { grad_enabled = enabled; }

namespace autograd {

AutogradMeta& meta_of(const Tensor& tensor) {
  TensorImpl* impl = tensor.impl();
  TS_CHECK(impl != nullptr, ValueError, "autograd: undefined tensor");
  if (!impl->autograd) impl->autograd = std::make_unique<AutogradMeta>();
  return static_cast<AutogradMeta&>(*impl->autograd);
}

bool needs_grad(std::initializer_list<Tensor> inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

bool needs_grad(const TensorList& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

namespace {

void attach(const std::shared_ptr<FunctionNode>& node, const TensorList& inputs, const TensorList& outputs) {
  for (const Tensor& input : inputs) node->next_edges().push_back(input.defined() ? gradient_edge(input) : Edge{});
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    node->outputs().push_back({out.sizes(), out.dtype(), out.device()});
    AutogradMeta& meta = meta_of(out);
    meta.requires_grad = true;
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
  }
}

}  // namespace

void record(const char* name, const TensorList& inputs, const TensorList& outputs, FunctionNode::Backward backward) {
  attach(std::make_shared<FunctionNode>(name, std::move(backward)), inputs, outputs);
}

void record(const char* name, const TensorList& inputs, const TensorList& outputs,
            FunctionNode::ReusingBackward backward) {
  attach(std::make_shared<FunctionNode>(name, std::move(backward)), inputs, outputs);
}

}  // namespace autograd
}  // namespace tessera
