// The autograd state a tensor carries once autograd concerns it.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "tessera/tensor/tensor.h"

namespace tessera::autograd {

class Node;

// Something another layer keeps on a tensor for as long as the tensor lives (FSDP marks
// the parameters it shards, and the optimizer and clip_grad_norm read the mark). Found by
// type, as Module attachments are.
struct TensorAttachment {
  virtual ~TensorAttachment() = default;
};

// Takes one of a leaf's gradients as it arrives (true), or declines it (false: the engine
// sums it with the others and AccumulateGrad adds the sum, as without a sink).
using GradientSink = std::function<bool(const Tensor& grad)>;

struct AutogradMeta final : AutogradMetaInterface {
  bool requires_grad = false;
  Tensor grad;                           // a leaf's accumulated gradient
  std::shared_ptr<Node> grad_fn;         // the node that made a non-leaf
  uint32_t output_nr = 0;                // which output of grad_fn this tensor is
  std::weak_ptr<Node> grad_accumulator;  // a leaf's AccumulateGrad node, made on demand
  std::vector<std::pair<int, GradHook>> hooks;  // a leaf's gradient hooks
  std::vector<PostAccumulateGradHook> post_accumulate_hooks;
  GradientSink gradient_sink;  // set_gradient_sink (engine.h)
  int next_hook_handle = 0;
  std::vector<std::shared_ptr<const TensorAttachment>> attachments;
};

// The tensor's meta, created if absent.
AutogradMeta& meta_of(const Tensor& tensor);
// The tensor's meta, or null.
inline AutogradMeta* find_meta(const Tensor& tensor) {
  // Only autograd makes one (meta_of), so the interface is always an AutogradMeta.
  return tensor.defined() ? static_cast<AutogradMeta*>(tensor.impl()->autograd.get()) : nullptr;
}

// Keeps `attachment` on `tensor` (every handle to it sees it; a detached copy does not).
inline void attach(const Tensor& tensor, std::shared_ptr<const TensorAttachment> attachment) {
  meta_of(tensor).attachments.push_back(std::move(attachment));
}
// The first attachment of type T on `tensor`, or null.
template <class T>
const T* find_attachment(const Tensor& tensor) {
  const AutogradMeta* meta = find_meta(tensor);
  if (meta == nullptr) return nullptr;
  for (const auto& attachment : meta->attachments) {
    if (const auto* typed = dynamic_cast<const T*>(attachment.get())) return typed;
  }
  return nullptr;
}

}  // namespace tessera::autograd
