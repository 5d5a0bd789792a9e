// Tensor's autograd members.
#include "tessera/autograd/engine.h"
#include "tessera/autograd/meta.h"
#include "tessera/autograd/node.h"

namespace tessera {

using autograd::find_meta;
using autograd::meta_of;

bool Tensor::requires_grad() const {
  const autograd::AutogradMeta* meta = find_meta(*this);
  return meta != nullptr && meta->requires_grad;
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  check_defined("requires_grad_");
  if (!requires_grad && find_meta(*this) == nullptr) return *this;
  autograd::AutogradMeta& meta = meta_of(*this);
  TS_CHECK(meta.grad_fn == nullptr || requires_grad, ValueError,
           "requires_grad_(false) on a non-leaf tensor; use detach()");
  TS_CHECK(!requires_grad || is_floating(dtype()), DTypeError, "only floating tensors can require grad, got ",
           dtype_name(dtype()));
  meta.requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const {
  const autograd::AutogradMeta* meta = find_meta(*this);
  return meta ? meta->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) {
  check_defined("set_grad");
  if (grad.defined()) {
    TS_CHECK(grad.sizes() == sizes(), ShapeError, "set_grad: gradient of shape ", shape_str(grad.sizes()),
             " for a tensor of shape ", shape_str(sizes()));
    TS_CHECK(grad.dtype() == dtype(), DTypeError, "set_grad: gradient of dtype ", dtype_name(grad.dtype()),
             " for a tensor of dtype ", dtype_name(dtype()));
  }
  meta_of(*this).grad = grad;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  check_defined("backward");
  autograd::backward({*this}, {gradient}, retain_graph);
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  const autograd::AutogradMeta* meta = find_meta(*this);
  return meta ? meta->grad_fn : nullptr;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

int Tensor::register_hook(GradHook hook) {
  TS_CHECK(requires_grad(), ValueError, "register_hook on ", str(), " which does not require grad");
  autograd::AutogradMeta& meta = meta_of(*this);
  if (meta.grad_fn) return meta.grad_fn->add_pre_hook(meta.output_nr, std::move(hook));
  int handle = meta.next_hook_handle++;
  meta.hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void Tensor::remove_hook(int handle) {
  autograd::AutogradMeta* meta = find_meta(*this);
  if (meta == nullptr) return;
  if (meta->grad_fn) {
    meta->grad_fn->remove_pre_hook(handle);
    return;
  }
  std::erase_if(meta->hooks, [handle](const auto& entry) { return entry.first == handle; });
}

void Tensor::register_post_accumulate_grad_hook(PostAccumulateGradHook hook) {
  TS_CHECK(requires_grad() && is_leaf(), ValueError,
           "register_post_accumulate_grad_hook needs a leaf that requires grad, got ", str());
  meta_of(*this).post_accumulate_hooks.push_back(std::move(hook));
}

}  // namespace tessera
