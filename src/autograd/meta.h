// The autograd state a tensor carries once autograd concerns it.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "tessera/tensor/tensor.h"

namespace tessera::autograd {

class Node;

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;                           // a leaf's accumulated gradient
  std::shared_ptr<Node> grad_fn;         // the node that made a non-leaf
  uint32_t output_nr = 0;                // which output of grad_fn this tensor is
  std::weak_ptr<Node> grad_accumulator;  // a leaf's AccumulateGrad node, made on demand
  std::vector<std::pair<int, GradHook>> hooks;  // a leaf's gradient hooks
  std::vector<PostAccumulateGradHook> post_accumulate_hooks;
  int next_hook_handle = 0;
};

// The tensor's meta, created if absent.
AutogradMeta& meta_of(const Tensor& tensor);
// The tensor's meta, or null.
inline AutogradMeta* find_meta(const Tensor& tensor) {
  return tensor.defined() ? tensor.impl()->autograd.get() : nullptr;
}

}  // namespace tessera::autograd
