// What the golden tests share: the golden files, loaded once, and the element-wise comparison
// with PyTorch's values: every element must satisfy |tessera - torch| <= atol + rtol * |torch|
// (a zero tolerance asks for equality), and the largest errors are kept per op and dtype for a
// report (TESSERA_GOLDEN_REPORT=1). And the driver of the files laid out by role
// (make_tensor_ops_golden.py, make_model_ops_golden.py): run_case_by_roles.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <map>
#include <string>
#include <vector>
#include <tessera/tessera.h>

namespace golden_check {

// A golden file: its tensors ("<case>/<role>") and its case table (the metadata entry
// "cases", JSON), as its generator (make_*golden.py) wrote them.
struct GoldenFile {
  tessera::StateDict tensors;
  tessera::io::Metadata metadata;
  tessera::io::json::Value cases;
};

// tests/golden/<name> of the source tree (TESSERA_SOURCE_DIR, which meson test sets), read on
// first use. Kept until exit and never destroyed: the library's allocators, which the
// tensors would be freed to, may be gone by then.
inline const GoldenFile& golden_file(const std::string& name) {
  static auto* loaded = new std::map<std::string, GoldenFile>();
  if (auto found = loaded->find(name); found != loaded->end()) return found->second;
  const char* dir = std::getenv("TESSERA_SOURCE_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "TESSERA_SOURCE_DIR is not set (meson test sets it)");
  const std::string path = std::string(dir) + "/tests/golden/" + name;
  GoldenFile file;
  file.tensors = tessera::io::load(path);
  file.metadata = tessera::io::load_metadata(path);
  file.cases = tessera::io::json::parse(file.metadata.at("cases"));
  return loaded->emplace(name, std::move(file)).first->second;
}

struct Tolerance {
  double atol;
  double rtol;
};

struct ErrorStats {
  double max_abs = 0;   // largest |a - b|
  double max_rel = 0;   // largest |a - b| / |b| where |b| >= 1e-3
  double max_used = 0;  // largest |a - b| / (atol + rtol |b|): at most 1 to pass
};

// "op f32" -> stats, for the report.
inline std::map<std::string, ErrorStats>& error_stats() {
  static std::map<std::string, ErrorStats> stats;
  return stats;
}

inline void compare(const std::string& what, const std::string& stats_key, const tessera::Tensor& actual,
                    const tessera::Tensor& expected, Tolerance tolerance) {
  CAPTURE(what);
  REQUIRE(actual.defined());
  REQUIRE(actual.sizes() == expected.sizes());
  REQUIRE(actual.dtype() == expected.dtype());
  std::vector<double> a = actual.to_vector<double>();
  std::vector<double> b = expected.to_vector<double>();
  ErrorStats& stats = error_stats()[stats_key];
  size_t worst = 0;
  double worst_used = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = std::abs(a[i] - b[i]);
    const double allowed = tolerance.atol + tolerance.rtol * std::abs(b[i]);
    const double used = diff == 0 ? 0 : (allowed == 0 ? INFINITY : diff / allowed);
    if (!(used <= worst_used)) worst_used = used, worst = i;  // also catches NaN
    stats.max_abs = std::max(stats.max_abs, diff);
    if (std::abs(b[i]) >= 1e-3) stats.max_rel = std::max(stats.max_rel, diff / std::abs(b[i]));
  }
  stats.max_used = std::max(stats.max_used, worst_used);
  if (!(worst_used <= 1.0)) {
    FAIL_CHECK(what << ": element " << worst << " is " << std::setprecision(17) << a[worst] << ", PyTorch gives "
                    << b[worst] << " (allowed: " << tolerance.atol << " + " << tolerance.rtol << " * |torch|)");
  }
}

// With TESSERA_GOLDEN_REPORT=1: the largest errors seen per op and dtype.
inline void print_report() {
  if (std::getenv("TESSERA_GOLDEN_REPORT") == nullptr) return;
  std::cout << "op                        max |a-b|   max rel     max used/allowed\n";
  for (const auto& [key, stats] : error_stats()) {
    std::cout << std::left << std::setw(26) << key << std::setw(12) << std::setprecision(3) << stats.max_abs
              << std::setw(12) << stats.max_rel << stats.max_used << "\n";
  }
}

// A JSON array of integers as a Shape (a case's dims, permutation or sizes).
inline tessera::Shape shape_of(const tessera::io::json::Value& array) {
  tessera::Shape shape;
  for (const tessera::io::json::Value& v : array.as_array()) shape.push_back(v.as_int());
  return shape;
}

// PyTorch's reduction strings.
inline tessera::Reduction reduction_from(const std::string& name) {
  if (name == "mean") return tessera::Reduction::mean;
  if (name == "sum") return tessera::Reduction::sum;
  REQUIRE(name == "none");
  return tessera::Reduction::none;
}

// One case of a file laid out by role: its inputs are the stored roles that are not
// outputs ("output", "output_<i>") or gradients ("grad_<role>"), those with a stored
// gradient made leaves; `run_op(inputs)` gives Tessera's outputs, each compared with the
// stored one; the stored upstream gradients are backpropagated and every leaf's gradient
// compared too.
template <class RunOp>
void run_case_by_roles(const GoldenFile& g, const tessera::io::json::Value& c, const std::string& stats_key,
                       Tolerance tolerance, RunOp run_op) {
  using tessera::Tensor;
  const std::string& name = c.at("name").as_string();
  const std::string prefix = name + "/";
  std::map<std::string, Tensor> inputs;
  for (const std::string& key : g.tensors.keys()) {
    if (!key.starts_with(prefix)) continue;
    const std::string role = key.substr(prefix.size());
    if (role.starts_with("output") || role.starts_with("grad_")) continue;
    Tensor t = g.tensors.at(key).clone();
    if (g.tensors.contains(prefix + "grad_" + role)) t.requires_grad_();
    inputs.emplace(role, t);
  }
  const std::vector<Tensor> outputs = run_op(inputs);
  std::vector<Tensor> roots, upstream;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string role = outputs.size() == 1 ? "output" : "output_" + std::to_string(i);
    REQUIRE_MESSAGE(g.tensors.contains(prefix + role), std::string(prefix + role));
    compare(name + " " + role, stats_key, outputs[i], g.tensors.at(prefix + role), tolerance);
    if (g.tensors.contains(prefix + "grad_" + role)) {
      roots.push_back(outputs[i]);
      upstream.push_back(g.tensors.at(prefix + "grad_" + role));
    }
  }
  if (roots.empty()) return;
  tessera::autograd::backward(roots, upstream);
  for (const auto& [role, t] : inputs) {
    if (!t.requires_grad()) continue;
    compare(name + " grad_" + role, stats_key, t.grad(), g.tensors.at(prefix + "grad_" + role), tolerance);
  }
}

}  // namespace golden_check
