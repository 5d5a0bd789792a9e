// ModuleHolder<M>: shared ownership of a module that is called like the module itself, as
// libtorch's ModuleHolder is: model(x), model->fc, *model. Model factories return one
// (ts::models::resnet18()), and make_module<M>(args...) makes one of any module, so that a
// user never writes (*model)(x).
//
//   auto model = ts::models::resnet18({.num_classes = 10});
//   ts::Tensor logits = model(images);                // Module::operator(): hooks, forward
//   ts::fsdp::fully_shard(*model, world);             // the module itself
//   model->load_state_dict(ts::io::load("resnet18.safetensors"));
//   auto net = ts::nn::make_module<Net>();            // a module of one's own
//   ts::nn::Sequential seq;
//   seq.push_back(net);                               // shares it
//
// Modules cannot be copied or moved (module.h), so a module that must outlive the scope
// that builds it, or be shared, lives in a holder. An empty holder (nullptr, or
// default-constructed) throws when used.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

#include "tessera/nn/module.h"

namespace tessera::nn {

template <class M>
class ModuleHolder {
  static_assert(std::is_base_of_v<Module, M>, "ModuleHolder holds modules");

 public:
  ModuleHolder() = default;
  ModuleHolder(std::nullptr_t) {}  // NOLINT: implicit, as for shared_ptr
  explicit ModuleHolder(std::shared_ptr<M> module) : module_(std::move(module)) {}

  // Calls the module (its operator(), which runs the forward hooks, then forward).
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    return checked()(std::forward<Args>(args)...);
  }
  M* operator->() const { return &checked(); }
  M& operator*() const { return checked(); }
  M* get() const { return module_.get(); }
  const std::shared_ptr<M>& ptr() const { return module_; }
  explicit operator bool() const { return module_ != nullptr; }

  // Shares the module as a shared_ptr to it or to one of its bases (what Sequential and
  // ModuleList take).
  template <class Base, class = std::enable_if_t<std::is_base_of_v<Base, M>>>
  operator std::shared_ptr<Base>() const {  // NOLINT: implicit on purpose
    return module_;
  }

 private:
  M& checked() const {
    TS_CHECK(module_ != nullptr, ValueError, "ModuleHolder: the holder is empty (no module was given)");
    return *module_;
  }

  std::shared_ptr<M> module_;
};

// A new M built from `args`, in a holder.
template <class M, class... Args>
ModuleHolder<M> make_module(Args&&... args) {
  return ModuleHolder<M>(std::make_shared<M>(std::forward<Args>(args)...));
}

}  // namespace tessera::nn
