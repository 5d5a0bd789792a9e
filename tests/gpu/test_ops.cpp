// The op samples the gpu suite takes (support/op_cases.h: suites.gpu, as ggml's
// test-backend-ops): each runs on the CPU and on the device with the same random inputs,
// forward and backward through autograd, and the device's outputs and input gradients must
// match the CPU's by normalised error within the tolerance of the dtype (gpu_test.cpp says
// why each). bfloat16 samples compare with float32 on the CPU, fed the same
// bfloat16-rounded inputs.
//
// The samples reach every native kernel and every backward node the library records;
// the node test below checks the nodes, so a new differentiable op cannot skip its row.
#include <doctest/doctest.h>

#include "support/backward_nodes.h"
#include "support/op_cases.h"

#include <cstdio>
#include <limits>
#include <set>
#include <tessera/tensor/native.h>

#include "gpu_test.h"

namespace ts = tessera;
namespace native = tessera::native;
using op_cases::OpCase;
using op_cases::TensorList;
using op_cases::uniform;
using ts::DType;
using ts::Tensor;

namespace {

constexpr DType f32 = DType::f32, f64 = DType::f64, bf16 = DType::bf16;

std::vector<const OpCase*> gpu_cases() {
  std::vector<const OpCase*> cases;
  for (const OpCase& c : op_cases::op_cases()) {
    if (!c.suites.gpu.empty()) cases.push_back(&c);
  }
  return cases;
}

// The case's inputs for the CPU reference and for the device. bfloat16 inputs are
// rounded once; the reference gets them back as float32.
struct CaseInputs {
  TensorList reference, device;
};

CaseInputs prepare(const OpCase& c, DType dtype) {
  CaseInputs prepared;
  for (const Tensor& made : c.inputs(dtype == bf16 ? f32 : dtype)) {
    const bool grad = made.requires_grad();
    Tensor base = made.detach();
    if (dtype == bf16 && base.dtype() == f32) base = base.to(bf16);
    Tensor reference = base.dtype() == bf16 ? base.to(f32) : base.clone();
    prepared.reference.push_back(reference.detach().requires_grad_(grad));
    prepared.device.push_back(base.to(gpu_test::target()).detach().requires_grad_(grad));
  }
  return prepared;
}

// Checks `actual` (on the device) against `expected` (the CPU's); returns the normalised
// error (infinite when they cannot be compared). CHECKs only, never REQUIREs: one GPU run
// must report every case, not stop at the first bad one.
double check_close(const Tensor& actual, const Tensor& expected, DType dtype, double tolerance_scale,
                   const std::string& what) {
  CAPTURE(what);
  constexpr double kInfinite = std::numeric_limits<double>::infinity();
  if (actual.defined() != expected.defined()) {
    FAIL_CHECK("defined on one side only (device: " << actual.defined() << ", CPU: " << expected.defined() << ")");
    return kInfinite;
  }
  if (!actual.defined()) return 0.0;
  CHECK(actual.device() == gpu_test::target());
  const bool floating = ts::is_floating(expected.dtype());
  CHECK(actual.dtype() == (floating && dtype == bf16 ? bf16 : expected.dtype()));
  Tensor on_host = actual.detach().cpu();
  if (on_host.dtype() == bf16) on_host = on_host.to(f32);
  std::string problem;
  const double error = gpu_test::normalised_error(on_host, expected.detach(), problem);
  const double tolerance = floating ? gpu_test::tolerance(dtype) * tolerance_scale : 0.0;
  INFO(problem);
  CHECK_MESSAGE(error <= tolerance, "normalised error " << error << " > tolerance " << tolerance);
  return error;
}

// The largest normalised errors of one case in one dtype (-1: nothing of that kind).
struct CaseErrors {
  double outputs = -1, gradients = -1;
};

std::string shown(double error) {
  if (error < 0) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", error);
  return text;
}

CaseErrors run_case(const OpCase& c, DType dtype) {
  CaseErrors errors;
  CaseInputs in = prepare(c, dtype);
  TensorList expected = c.f(in.reference);
  TensorList actual = c.f(in.device);
  if (actual.size() != expected.size()) {
    FAIL_CHECK(actual.size() << " outputs on the device, " << expected.size() << " on the CPU");
    return errors;
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    errors.outputs = std::max(errors.outputs, check_close(actual[i], expected[i], dtype, c.suites.gpu_tolerance_scale,
                                                          "output " + std::to_string(i)));
  }
  const Tensor& out = expected.front();
  if (!ts::is_floating(out.dtype()) || !out.requires_grad()) return errors;
  ts::Generator gen(4242);
  Tensor seed_grad = ts::rand(out.sizes(), gen, {.dtype = f64}).to(dtype == bf16 ? bf16 : out.dtype());
  expected.front().backward(seed_grad.dtype() == bf16 ? seed_grad.to(f32) : seed_grad);
  actual.front().backward(seed_grad.to(gpu_test::target()));
  for (size_t i = 0; i < in.reference.size(); ++i) {
    if (!in.reference[i].requires_grad()) continue;
    errors.gradients = std::max(errors.gradients, check_close(in.device[i].grad(), in.reference[i].grad(), dtype,
                                                              c.suites.gpu_tolerance_scale, "gradient of input " + std::to_string(i)));
  }
  return errors;
}

}  // namespace

TEST_CASE("every op on the device matches the CPU, outputs and gradients") {
  // The table of errors goes to stdout (meson's test log) on success too: it is the
  // record of a GPU run, for docs/gpu.md.
  std::printf("%-52s %-9s %-14s %s\n", "case", "dtype", "output error", "gradient error");
  size_t runs = 0;
  for (const OpCase* sample : gpu_cases()) {
    const OpCase& c = *sample;
    for (DType dtype : c.suites.gpu) {
      if (dtype == bf16 && !gpu_test::cuda_target()) continue;  // the CPU has no bfloat16 arithmetic
      CAPTURE(c.name);
      CAPTURE(dtype);
      ++runs;
      try {
        const CaseErrors errors = run_case(c, dtype);
        std::printf("%-52s %-9s %-14s %s\n", c.name.c_str(), std::string(ts::dtype_name(dtype)).c_str(),
                    shown(errors.outputs).c_str(), shown(errors.gradients).c_str());
      } catch (const std::exception& e) {
        FAIL_CHECK("threw: " << std::string(e.what()));
        std::printf("%-52s %-9s threw: %s\n", c.name.c_str(), std::string(ts::dtype_name(dtype)).c_str(), e.what());
      }
    }
  }
  std::printf("gpu suite: %zu samples, %zu sample-dtype runs\n", gpu_cases().size(), runs);
}

TEST_CASE("the table reaches every backward node the library records") {
  std::set<std::string> recorded = test_support::recorded_backward_nodes();

  std::set<std::string> covered;
  for (const OpCase* c : gpu_cases()) {
    if (c->suites.gpu.front() == bf16) continue;
    CaseInputs in = prepare(*c, c->suites.gpu.front());
    TensorList outputs = c->f(in.device);
    test_support::collect_node_names(outputs.front(), covered);
  }
  // Moving between devices records a node only when there are two devices.
  if (!gpu_test::cuda_target()) recorded.erase("ToDeviceBackward");
  for (const std::string& name : recorded) {
    CAPTURE(name);
    CHECK(covered.count(name) == 1);
  }
}

TEST_CASE("bfloat16 attention keeps its scores and log-sum-exp in float32") {
  if (!gpu_test::cuda_target()) return;  // the CPU has no bfloat16 attention
  // The products of bfloat16 values are exact in float32 and cuBLAS sums them in float32, so
  // the log-sum-exp equals the CPU's float32 one on the same rounded inputs to float32
  // rounding (gpu_test::tolerance(f32)); scores rounded to bfloat16 would be ~1e-3 off.
  const Tensor q = uniform({2, 3, 40, 16}, 177, f32).detach().to(bf16), k = uniform({2, 3, 50, 16}, 178, f32).detach().to(bf16);
  const Tensor v = uniform({2, 3, 50, 8}, 179, f32).detach().to(bf16);
  const native::AttentionOptions options{.is_causal = true, .scale = 0.7};
  auto [expected_out, expected_lse] = native::scaled_dot_product_attention(q.to(f32), k.to(f32), v.to(f32), options);
  const ts::Device device = gpu_test::target();
  auto [out, lse] = native::scaled_dot_product_attention(q.to(device), k.to(device), v.to(device), options);
  CHECK(out.dtype() == bf16);
  REQUIRE(lse.dtype() == f32);
  std::string problem;
  CHECK(gpu_test::normalised_error(lse.cpu(), expected_lse, problem) <= gpu_test::tolerance(f32));
  CHECK(gpu_test::normalised_error(out.cpu().to(f32), expected_out, problem) <= gpu_test::tolerance(bf16));
  // The backward takes it back in float32 and refuses a bfloat16 one, naming both dtypes.
  const Tensor grad = ts::ones_like(out);
  CHECK_NOTHROW(native::scaled_dot_product_attention_backward(grad, q.to(device), k.to(device), v.to(device), out, lse, options));
  CHECK_THROWS_WITH_AS(native::scaled_dot_product_attention_backward(grad, q.to(device), k.to(device), v.to(device), out,
                                                                     lse.to(bf16), options),
                       doctest::Contains("expected the log-sum-exp in float32 for bfloat16 operands, got bfloat16"),
                       ts::DTypeError);
}
