// Every op sample the table marks for it (support/op_cases.h: suites.gradcheck) checked in
// f64 against central differences. Every backward node the library records (found by
// scanning src/autograd/functions) must be reached by some of those samples, so a new
// differentiable op cannot skip its gradient check.
#include <doctest/doctest.h>

#include "support/backward_nodes.h"
#include "support/op_cases.h"

#include <cstdio>
#include <set>
#include <tessera/tessera.h>

namespace ts = tessera;
using op_cases::OpCase;
using op_cases::TensorList;
using ts::DType;
using ts::Tensor;

namespace {

std::vector<const OpCase*> gradcheck_cases() {
  std::vector<const OpCase*> cases;
  for (const OpCase& c : op_cases::op_cases()) {
    if (c.suites.gradcheck) cases.push_back(&c);
  }
  return cases;
}

// The differentiated output: the sample's first.
Tensor first_output(const OpCase& c, const TensorList& inputs) { return c.f(inputs).front(); }

}  // namespace

TEST_CASE("every differentiable op passes its f64 gradient check") {
  // A line per sample on stdout (meson's test log), as the gpu suite's table.
  const std::vector<const OpCase*> cases = gradcheck_cases();
  for (const OpCase* c : cases) {
    CAPTURE(c->name);
    TensorList inputs = c->inputs(DType::f64);
    ts::autograd::GradcheckResult result =
        ts::autograd::gradcheck([c](const TensorList& x) { return first_output(*c, x); }, inputs);
    INFO(result.message);
    CHECK(result.ok);
    std::printf("%-70s %s (largest error %.1e)\n", c->name.c_str(), result.ok ? "ok" : "FAILED", result.max_error);
  }
  std::printf("gradcheck table: %zu samples checked in float64\n", cases.size());
}

TEST_CASE("the table reaches every backward node the library records") {
  std::set<std::string> recorded = test_support::recorded_backward_nodes();

  std::set<std::string> covered;
  for (const OpCase* c : gradcheck_cases()) test_support::collect_node_names(first_output(*c, c->inputs(DType::f64)), covered);
  // Moving between devices needs a second device: the gpu suite checks that node.
  recorded.erase("ToDeviceBackward");
  for (const std::string& name : recorded) {
    CAPTURE(name);
    CHECK(covered.count(name) == 1);
  }
}
