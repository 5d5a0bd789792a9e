// --init, shared by the examples: a safetensors file of PyTorch-named weights is checked
// against the model by its header alone (names and shapes) before any tensor is read, so a
// wrong or hostile file (a sparse 8 GiB tensor of the wrong shape) is refused without
// reading, or allocating, what it claims to hold.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include <tessera/tessera.h>

namespace example {

// The file's tensors that the model takes, read once the header matched (strict: every
// name, as Module::load_state_dict). `skip`: names neither checked nor read (a classifier
// head for another number of classes). ValueError listing every difference.
inline tessera::StateDict read_initial_weights(tessera::nn::Module& model, const tessera::io::SafetensorsFile& file,
                                               bool strict = true, const std::set<std::string>& skip = {}) {
  const std::vector<std::pair<std::string, tessera::Shape>> expected = model.state_shapes();
  std::vector<std::pair<std::string, tessera::Shape>> found;
  for (const tessera::io::TensorEntry& entry : file.entries()) {
    if (skip.count(entry.name) == 0) found.emplace_back(entry.name, entry.shape);
  }
  tessera::nn::check_state_dict_match(expected, found, strict, model.type_name() + " (--init " + file.path() + ")");
  tessera::StateDict weights;
  for (const auto& [name, shape] : expected) {
    if (file.contains(name) && skip.count(name) == 0) weights.insert(name, file.read(name));
  }
  return weights;
}

}  // namespace example
