// torch.nn.ModuleList, torch.nn.Sequential and torch.nn.ModuleDict: containers that hold
// modules and register them as children (so parameters, state dicts, train/eval, to() and
// FSDP's wrap policies see them under PyTorch's names: "h.0.attn.weight",
// "transformer.wte.weight"). ModuleList and ModuleDict are never called themselves; a
// Sequential is a ModuleList whose forward runs its modules in order.
//
//   struct GPT : ts::nn::Module {
//     ts::nn::ModuleList h;
//     GPT(int n_layer) {
//       for (int i = 0; i < n_layer; ++i) h.emplace<Block>();
//       register_module("h", h);
//     }
//     ts::Tensor forward(ts::Tensor x) override {
//       for (ts::nn::Module& block : h) x = block(x);
//       return x;
//     }
//   };
//   Block& first = gpt.h.at<Block>(0);   // the module's own type; a clear error otherwise
//
// Modules are owned (shared_ptr) and named by position, as in PyTorch; a ModuleDict keeps
// insertion order. Entries cannot be removed or replaced once registered (the registry
// is by reference, and parameters already handed out must stay valid).
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "tessera/nn/module.h"

namespace tessera::nn {

// The module `module` as an M, or a ValueError naming `where` and both types.
template <class M>
M& module_as(Module& module, const std::string& where) {
  auto* typed = dynamic_cast<M*>(&module);
  TS_CHECK(typed != nullptr, ValueError, where, " is a ", module.type_name(), ", not a ",
           class_name_of(typeid(M)));
  return *typed;
}

// The iterator of ModuleList and ModuleDict: walks their storage and hands out what
// `Deref` makes of each entry (the module, or its key and module).
template <class Base, class Deref>
class EntryIterator {
 public:
  explicit EntryIterator(Base it) : it_(it) {}
  decltype(auto) operator*() const { return Deref{}(*it_); }
  EntryIterator& operator++() {
    ++it_;
    return *this;
  }
  bool operator==(const EntryIterator& other) const { return it_ == other.it_; }

 private:
  Base it_;
};

class ModuleList : public Module {
 public:
  ModuleList() = default;
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);

  // Appends `module`, named by its position ("0", "1", ...).
  ModuleList& append(std::shared_ptr<Module> module);
  ModuleList& push_back(std::shared_ptr<Module> module) { return append(std::move(module)); }
  ModuleList& extend(const std::vector<std::shared_ptr<Module>>& modules);
  // Builds an M in place and appends it; returns it.
  template <class M, class... Args>
  M& emplace(Args&&... args) {
    auto module = std::make_shared<M>(std::forward<Args>(args)...);
    M& ref = *module;
    append(std::move(module));
    return ref;
  }

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  // The module at `index`; negative indices count from the end, as in Python.
  Module& operator[](int64_t index) const { return *modules_[position(index)]; }
  // The module at `index` as its own type M; a ValueError if it is not an M.
  template <class M>
  M& at(int64_t index) const {
    const size_t i = position(index);
    return module_as<M>(*modules_[i], describe(i));
  }
  std::shared_ptr<Module> ptr(int64_t index) const { return modules_[position(index)]; }

  // Iteration over the modules, as Module&.
  struct AsModule {
    Module& operator()(const std::shared_ptr<Module>& module) const { return *module; }
  };
  using Iterator = EntryIterator<std::vector<std::shared_ptr<Module>>::const_iterator, AsModule>;
  Iterator begin() const { return Iterator(modules_.begin()); }
  Iterator end() const { return Iterator(modules_.end()); }

  Tensor forward(Tensor input) override;
  bool is_container() const override { return true; }

 private:
  size_t position(int64_t index) const;
  std::string describe(size_t index) const;

  std::vector<std::shared_ptr<Module>> modules_;
};

// Runs its modules in order; they are named "0", "1", ... as in PyTorch, and indexed,
// iterated and extended as a ModuleList's.
//
//   ts::nn::Sequential mlp;
//   mlp.emplace<ts::nn::Linear>(784, 128);
//   mlp.emplace<ts::nn::ReLU>();
//   ts::nn::Sequential head{std::make_shared<ts::nn::Linear>(128, 10), std::make_shared<ts::nn::LogSoftmax>(1)};
class Sequential : public ModuleList {
 public:
  using ModuleList::ModuleList;
  Tensor forward(Tensor input) override;
  bool is_container() const override { return false; }  // it is called: FSDP may make it a unit
};

class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> items);

  // Adds `module` under `key` (a valid module name: non-empty, no '.'); an existing key
  // is an error.
  ModuleDict& insert(const std::string& key, std::shared_ptr<Module> module);
  template <class M, class... Args>
  M& emplace(const std::string& key, Args&&... args) {
    auto module = std::make_shared<M>(std::forward<Args>(args)...);
    M& ref = *module;
    insert(key, std::move(module));
    return ref;
  }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  bool contains(const std::string& key) const { return find(key) != nullptr; }
  // The module under `key`; an IndexError naming the keys there are otherwise.
  Module& operator[](const std::string& key) const;
  template <class M>
  M& at(const std::string& key) const {
    return module_as<M>((*this)[key], describe(key));
  }
  std::shared_ptr<Module> ptr(const std::string& key) const;
  std::vector<std::string> keys() const;

  // Iteration over (key, module) pairs in insertion order: for (auto [key, module] : dict).
  struct AsItem {
    std::pair<const std::string&, Module&> operator()(const std::pair<std::string, std::shared_ptr<Module>>& item) const {
      return {item.first, *item.second};
    }
  };
  using Iterator = EntryIterator<std::vector<std::pair<std::string, std::shared_ptr<Module>>>::const_iterator, AsItem>;
  Iterator begin() const { return Iterator(items_.begin()); }
  Iterator end() const { return Iterator(items_.end()); }

  Tensor forward(Tensor input) override;
  bool is_container() const override { return true; }

 private:
  const std::shared_ptr<Module>* find(const std::string& key) const;
  std::string describe(const std::string& key) const;

  std::vector<std::pair<std::string, std::shared_ptr<Module>>> items_;
};

}  // namespace tessera::nn
