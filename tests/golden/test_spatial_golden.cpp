// Golden checks of the spatial and index-contraction ops against PyTorch:
// tests/golden/make_spatial_golden.py ran torch.einsum (matmuls, transposes, diagonals,
// traces, implicit outputs, ellipses, letters summed in one operand, three operands), F.pad
// (constant with negative amounts, reflect, replicate, circular), F.unfold and F.fold (with
// dilation, padding and stride) and F.interpolate (nearest with sizes and fractional scale
// factors, nearest-exact, linear / bilinear / trilinear with and without align_corners), on
// contiguous and permuted inputs, in float32 and float64, and stored inputs, outputs, upstream
// gradients and input gradients in spatial.safetensors. Tessera runs the same ops on the same
// inputs and every output and gradient element must satisfy |tessera - torch| <= atol + rtol *
// |torch|. PyTorch is not needed to run this.
//
// Set TESSERA_GOLDEN_REPORT=1 to print the largest errors per op and dtype.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <tessera/tessera.h>

#include "golden_compare.h"

namespace ts = tessera;
namespace io = tessera::io;
namespace json = tessera::io::json;
using ts::DType;
using ts::Shape;
using ts::Tensor;
using golden_check::compare;
using golden_check::Tolerance;

namespace {

// The allowed |a - b| <= atol + rtol |b| per op and dtype. Measured with torch 1.13 on
// x86-64 (TESSERA_GOLDEN_REPORT=1), largest |a - b| over outputs and gradients:
//   exact (0) in both dtypes: unfold and fold (forward and backward), and the outputs of pad
//     and nearest interpolation (copies: held to equality);
//   f64: einsum 3.6e-15, linear modes 8.9e-16, gradients of pad 1.8e-15 and nearest 8.9e-16;
//   f32: einsum 9.5e-7, linear modes 7.2e-7, gradients of pad 4.8e-7 and nearest 2.4e-7.
// einsum differs from PyTorch's in the order and blocking of the matmul's sums (its own
// permutes and reshapes differ from ours). The linear modes' indices and weights are
// PyTorch's to the bit (the same formulas in the same precision); the values differ only
// where the lerp w0 * a + w1 * b, or its backward's sums, round differently. The gradients of
// pad's index modes and of nearest sum the repeated positions' upstream gradients in
// index_add's order (one pass per dim), PyTorch in its kernels' (all dims at once): a few
// ulps. Each bound is at least 3x the largest error seen; a wrong index, weight or crop is off
// by 1e-2 or more.
Tolerance tolerance_for(const std::string& op, DType dtype) {
  if (op == "unfold" || op == "fold") return {0, 0};
  if (dtype == DType::f64) return {1e-13, 1e-13};
  return {5e-6, 5e-6};
}

// Ops whose output only copies input elements: their outputs must equal PyTorch's.
bool copies_only(const std::string& op, const std::string& mode) {
  return op == "pad" || op == "unfold" || (op == "interpolate" && mode.find("linear") == std::string::npos);
}

using Golden = golden_check::GoldenFile;

const Golden& golden() { return golden_check::golden_file("spatial.safetensors"); }

std::vector<int64_t> ints_of(const json::Value& array) {
  std::vector<int64_t> values;
  for (const json::Value& v : array.as_array()) values.push_back(v.as_int());
  return values;
}

ts::Size2 size2_of(const json::Value& array) {
  const std::vector<int64_t> v = ints_of(array);
  REQUIRE(v.size() == 2);
  return {v[0], v[1]};
}

ts::InterpolateOptions interpolate_options(const json::Value& c) {
  ts::InterpolateOptions options{.mode = c.at("mode").as_string()};
  if (c.find("size") != nullptr) options.size = ints_of(c.at("size"));
  if (c.find("scale_factor") != nullptr)
    for (const json::Value& v : c.at("scale_factor").as_array()) options.scale_factor.push_back(v.as_double());
  if (c.find("align_corners") != nullptr) options.align_corners = c.at("align_corners").as_bool();
  return options;
}

// Tessera's output for a case, mirroring run_op in the script.
Tensor run_op(const json::Value& c, std::vector<Tensor> xs) {
  const std::string& op = c.at("op").as_string();
  if (c.find("permute") != nullptr) xs[0] = xs[0].permute(ints_of(c.at("permute")));
  if (op == "einsum") return ts::einsum(c.at("equation").as_string(), xs);
  const Tensor& x = xs[0];
  if (op == "pad") {
    const std::string& mode = c.at("mode").as_string();
    return ts::pad(x, ints_of(c.at("pad")), mode, mode == "constant" ? c.at("value").as_double() : 0.0);
  }
  if (op == "unfold") {
    return ts::unfold(x, size2_of(c.at("kernel_size")), size2_of(c.at("dilation")), size2_of(c.at("padding")),
                      size2_of(c.at("stride")));
  }
  if (op == "fold") {
    return ts::fold(x, size2_of(c.at("output_size")), size2_of(c.at("kernel_size")), size2_of(c.at("dilation")),
                    size2_of(c.at("padding")), size2_of(c.at("stride")));
  }
  if (op == "interpolate") return ts::interpolate(x, interpolate_options(c));
  FAIL("unknown op " << op);
  return {};
}

void run_case(const json::Value& c) {
  const Golden& g = golden();
  const std::string& name = c.at("name").as_string();
  const std::string& op = c.at("op").as_string();
  const std::string mode = c.find("mode") != nullptr ? c.at("mode").as_string() : "";
  const DType dtype = *io::dtype_from_safetensors(c.at("dtype").as_string());
  const Tolerance tolerance = tolerance_for(op, dtype);
  const bool linear = mode.find("linear") != std::string::npos;
  const std::string stats_key =
      op + (op == "interpolate" ? (linear ? " linear" : " nearest") : "") + " " + std::string(ts::dtype_name(dtype));
  const std::string prefix = name + "/";

  // The inputs: "input", or einsum's "input_0", "input_1", ...; all are leaves.
  std::vector<std::string> roles;
  if (g.tensors.contains(prefix + "input")) roles.push_back("input");
  for (int i = 0; g.tensors.contains(prefix + "input_" + std::to_string(i)); ++i) roles.push_back("input_" + std::to_string(i));
  REQUIRE(!roles.empty());
  std::vector<Tensor> inputs;
  for (const std::string& role : roles) inputs.push_back(g.tensors.at(prefix + role).clone().requires_grad_());

  const Tensor output = run_op(c, inputs);
  compare(name + " output", stats_key, output, g.tensors.at(prefix + "output"),
          copies_only(op, mode) ? Tolerance{0, 0} : tolerance);
  output.backward(g.tensors.at(prefix + "grad_output"));
  for (size_t i = 0; i < roles.size(); ++i) {
    compare(name + " grad_" + roles[i], stats_key, inputs[i].grad(), g.tensors.at(prefix + "grad_" + roles[i]),
            tolerance);
  }
}

}  // namespace

TEST_CASE("spatial golden file: every case the script writes") {
  const Golden& g = golden();
  CHECK(g.metadata.at("generator") == "tests/golden/make_spatial_golden.py");
  // A regenerated file that lost an op fails here rather than silently testing less.
  std::map<std::string, int> cases_per_op;
  std::set<std::string> names;
  for (const json::Value& c : g.cases.as_array()) {
    CHECK(names.insert(c.at("name").as_string()).second);
    ++cases_per_op[c.at("op").as_string()];
  }
  CHECK(cases_per_op["einsum"] == 32);
  CHECK(cases_per_op["pad"] == 20);
  CHECK(cases_per_op["unfold"] == 6);
  CHECK(cases_per_op["fold"] == 4);
  CHECK(cases_per_op["interpolate"] == 28);
}

TEST_CASE("spatial golden: outputs and gradients match PyTorch") {
  for (const json::Value& c : golden().cases.as_array()) {
    CAPTURE(c.at("name").as_string());
    run_case(c);
  }
  golden_check::print_report();
}

TEST_CASE("spatial ops: bad arguments throw errors that name them") {
  const Tensor x = ts::zeros({2, 3, 4, 5});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const ts::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message([&] { ts::einsum("ij,jk->ik", {x}); }).find("2 input terms but 1 operands") != std::string::npos);
  CHECK(message([&] { ts::einsum("ij1->i", {ts::zeros({2, 2})}); }).find("at position 2: invalid subscript '1'") !=
        std::string::npos);
  CHECK(message([&] { ts::einsum("ij->k", {ts::zeros({2, 2})}); }).find("'k' appears in no input") !=
        std::string::npos);
  CHECK(message([&] { ts::einsum("ij,jk", {ts::zeros({2, 3}), ts::zeros({4, 2})}); }).find("subscript 'j' has size 3") !=
        std::string::npos);
  CHECK(message([&] { ts::einsum("ii->i", {ts::zeros({2, 3})}); }).find("'i' is repeated") != std::string::npos);
  CHECK(message([&] { ts::einsum("ijk", {ts::zeros({2, 3})}); }).find("operand 0 has 2 dims") != std::string::npos);
  CHECK(message([&] { ts::pad(x, {1, 2, 3}); }).find("even length") != std::string::npos);
  CHECK(message([&] { ts::pad(x, {5, 0}, "reflect"); }).find("less than its size 5") != std::string::npos);
  CHECK(message([&] { ts::pad(x, {0, 6}, "circular"); }).find("more than once") != std::string::npos);
  CHECK(message([&] { ts::pad(x, {1, 1}, "edge"); }).find("\"edge\"") != std::string::npos);
  CHECK(message([&] { ts::unfold(x, 6); }).find("sliding blocks") != std::string::npos);
  CHECK(message([&] { ts::fold(ts::zeros({1, 8, 5}), {3, 3}, 2); }).find("number of sliding blocks, 4") !=
        std::string::npos);
  CHECK(message([&] { ts::interpolate(x, {.size = {3}, .mode = "linear"}); }).find("needs a 3-D input") !=
        std::string::npos);
  CHECK(message([&] { ts::interpolate(x, {.size = {3}, .align_corners = true}); }).find("align_corners") !=
        std::string::npos);
  CHECK(message([&] { ts::interpolate(x, {}); }).find("exactly one of size and scale_factor") != std::string::npos);
}

TEST_CASE("nn::Upsample is interpolate as a module, printed as PyTorch prints it") {
  ts::Generator gen(5);
  const Tensor x = ts::randn({1, 2, 3, 4}, gen);
  ts::nn::Upsample up({.scale_factor = {2.0}, .mode = "bilinear"});
  CHECK(ts::equal(up(x), ts::interpolate(x, {.scale_factor = {2.0}, .mode = "bilinear"})));
  CHECK(up.extra_repr() == "scale_factor=2.0, mode='bilinear'");
  CHECK(ts::nn::Upsample({.size = {5, 7}}).extra_repr() == "size=(5, 7), mode='nearest'");
  CHECK(ts::nn::Upsample({.scale_factor = {1.5, 0.1}}).extra_repr() == "scale_factor=(1.5, 0.1), mode='nearest'");
  CHECK(ts::nn::Upsample({.size = {5, 7}})(x).sizes() == Shape{1, 2, 5, 7});
}
