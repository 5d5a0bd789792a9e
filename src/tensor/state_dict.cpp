#include "tessera/tensor/state_dict.h"

#include "tessera/tensor/error.h"

namespace tessera {

void StateDict::insert(const std::string& name, Tensor tensor) {
  auto it = index_.find(name);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(tensor);
    return;
  }
  index_.emplace(name, entries_.size());
  entries_.emplace_back(name, std::move(tensor));
}

const Tensor& StateDict::at(const std::string& name) const {
  auto it = index_.find(name);
  TS_CHECK(it != index_.end(), ValueError, "state dict has no entry '", name, "'");
  return entries_[it->second].second;
}

Tensor& StateDict::at(const std::string& name) {
  auto it = index_.find(name);
  TS_CHECK(it != index_.end(), ValueError, "state dict has no entry '", name, "'");
  return entries_[it->second].second;
}

void StateDict::erase(const std::string& name) {
  auto it = index_.find(name);
  if (it == index_.end()) return;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(it->second));
  index_.clear();
  for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, tensor] : entries_) out.push_back(name);
  return out;
}

}  // namespace tessera
