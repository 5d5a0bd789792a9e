// An ordered name -> tensor map: what Module::state_dict() returns and the safetensors
// files hold. Order is insertion order (PyTorch's registration order).
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tessera/tensor/tensor.h"

namespace tessera {

class StateDict {
 public:
  using Entry = std::pair<std::string, Tensor>;

  // Adds `name`, or replaces its tensor when present (keeping its position).
  void insert(const std::string& name, Tensor tensor);
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // The tensor called `name`; throws ValueError naming the key when absent.
  const Tensor& at(const std::string& name) const;
  Tensor& at(const std::string& name);
  // Removes `name` if present.
  void erase(const std::string& name);

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  std::vector<std::string> keys() const;
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }
  auto begin() { return entries_.begin(); }
  auto end() { return entries_.end(); }

 private:
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace tessera
