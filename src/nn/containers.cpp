#include "tessera/nn/containers.h"

#include <sstream>

namespace tessera::nn {

namespace {

std::string where_of(const Module& container, const std::string& entry) {
  return container.path().empty() ? entry : container.path() + "." + entry;
}

}  // namespace

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& module : modules) append(module);
}

ModuleList& ModuleList::append(std::shared_ptr<Module> module) {
  TS_CHECK(module != nullptr, ValueError, type_name(), ": cannot append a null module");
  modules_.push_back(std::move(module));
  register_module(std::to_string(modules_.size() - 1), *modules_.back());
  return *this;
}

ModuleList& ModuleList::extend(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& module : modules) append(module);
  return *this;
}

size_t ModuleList::position(int64_t index) const {
  const int64_t size = static_cast<int64_t>(modules_.size());
  TS_CHECK(index >= -size && index < size, IndexError, type_name(),
           path().empty() ? std::string() : " '" + path() + "'", ": index ", index, " is out of range for ", size,
           " modules");
  return static_cast<size_t>(index < 0 ? index + size : index);
}

std::string ModuleList::describe(size_t index) const {
  return type_name() + " entry '" + where_of(*this, std::to_string(index)) + "'";
}

Tensor ModuleList::forward(Tensor) {
  throw Error("ModuleList" + (path().empty() ? std::string() : " '" + path() + "'") +
              " is a container and has no forward: iterate over its modules and call them");
}

Tensor Sequential::forward(Tensor input) {
  for (Module& module : *this) input = module(std::move(input));
  return input;
}

ModuleDict::ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> items) {
  for (const auto& [key, module] : items) insert(key, module);
}

ModuleDict& ModuleDict::insert(const std::string& key, std::shared_ptr<Module> module) {
  TS_CHECK(module != nullptr, ValueError, "ModuleDict: cannot insert a null module under '", key, "'");
  TS_CHECK(!contains(key), ValueError, "ModuleDict: key '", key, "' is already taken (entries cannot be replaced)");
  register_module(key, *module);  // checks the name
  items_.emplace_back(key, std::move(module));
  return *this;
}

const std::shared_ptr<Module>* ModuleDict::find(const std::string& key) const {
  for (const auto& [name, module] : items_) {
    if (name == key) return &module;
  }
  return nullptr;
}

Module& ModuleDict::operator[](const std::string& key) const { return *ptr(key); }

std::shared_ptr<Module> ModuleDict::ptr(const std::string& key) const {
  const std::shared_ptr<Module>* module = find(key);
  if (module == nullptr) {
    std::ostringstream known;
    for (size_t i = 0; i < items_.size(); ++i) known << (i > 0 ? ", " : "") << items_[i].first;
    throw IndexError(detail::concat("ModuleDict", path().empty() ? std::string() : " '" + path() + "'",
                                    ": no module under '", key, "' (keys: ", items_.empty() ? "none" : known.str(),
                                    ")"));
  }
  return *module;
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [key, module] : items_) out.push_back(key);
  return out;
}

std::string ModuleDict::describe(const std::string& key) const {
  return "ModuleDict entry '" + where_of(*this, key) + "'";
}

Tensor ModuleDict::forward(Tensor) {
  throw Error("ModuleDict" + (path().empty() ? std::string() : " '" + path() + "'") +
              " is a container and has no forward: call its modules");
}

}  // namespace tessera::nn
