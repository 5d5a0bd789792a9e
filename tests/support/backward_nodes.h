// What the op-table tests (tests/autograd's gradient checks, tests/gpu's CPU-vs-CUDA
// comparison) need to prove that every differentiable op has its row: the backward node
// names the library records, and the names a graph reaches.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <tessera/tessera.h>

namespace test_support {

// Every `record("XBackward", ...)` name in src/autograd/functions, also through the
// record_unary/record_normalization/record_pick helpers (found through
// TESSERA_SOURCE_DIR, which meson test sets).
inline std::set<std::string> recorded_backward_nodes() {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  REQUIRE_MESSAGE(source != nullptr, "TESSERA_SOURCE_DIR must point at the source tree");
  std::set<std::string> recorded;
  const std::regex pattern(R"re(record(?:_\w+)?\("(\w+Backward)")re");
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(source) / "src/autograd/functions")) {
    std::ifstream file(entry.path());
    std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    for (std::sregex_iterator it(text.begin(), text.end(), pattern), end; it != end; ++it) recorded.insert((*it)[1]);
  }
  REQUIRE(recorded.size() > 20);
  return recorded;
}

// Adds the names of the backward nodes reachable from `output` to `names`.
inline void collect_node_names(const tessera::Tensor& output, std::set<std::string>& names) {
  std::vector<std::shared_ptr<tessera::autograd::Node>> stack;
  if (output.grad_fn()) stack.push_back(output.grad_fn());
  std::set<tessera::autograd::Node*> seen;
  while (!stack.empty()) {
    auto node = stack.back();
    stack.pop_back();
    if (!seen.insert(node.get()).second) continue;
    names.insert(node->name());
    for (auto& edge : node->next_edges()) {
      if (edge.node) stack.push_back(edge.node);
    }
  }
}

}  // namespace test_support
