// Golden checks of the tensor ops against PyTorch: tests/golden/make_tensor_ops_golden.py ran
// masked_fill, flip, tril/triu, split/chunk, index_select, gather, scatter_add, topk, cumsum,
// softmax/log_softmax over every dim (contiguous or permuted), nll_loss/cross_entropy on
// [C], [N, C] and [N, C, d1, ...] with ignore_index, weights and label smoothing, and the
// comparisons and logical ops that give bool, in float32 and float64 (int64 and bool where
// they apply), and stored inputs, outputs, upstream gradients and input gradients in
// tensor_ops.safetensors. Tessera runs the same ops on the same inputs and every output and
// gradient element must satisfy |tessera - torch| <= atol + rtol * |torch|; integer and bool
// outputs must be equal. PyTorch is not needed to run this.
//
// Set TESSERA_GOLDEN_REPORT=1 to print the largest errors per op and dtype.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
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
using golden_check::reduction_from;
using golden_check::shape_of;
using golden_check::Tolerance;
using TensorList = std::vector<Tensor>;

namespace {

// The allowed |a - b| <= atol + rtol |b| per op and dtype. Measured with torch 1.13 on
// x86-64 (TESSERA_GOLDEN_REPORT=1), largest |a - b| over outputs and gradients:
//   exact (0) in both dtypes: tril, triu, flip, split, chunk, index_select, gather, scatter_add,
//     topk, cumsum (forward and backward), comparisons, logical, masked_fill in f64;
//   f64: softmax 1.7e-16, log_softmax 8.9e-16, nll_loss 4.4e-16, cross_entropy 8.9e-16;
//   f32: masked_fill 2.4e-7, softmax 8.6e-8, log_softmax 4.8e-7, nll_loss 4.8e-7,
//        cross_entropy 2.4e-7.
// Selections copy values, and their backward adds the same few terms in the same order as
// PyTorch's CPU kernels; cumsum accumulates in double as PyTorch's CPU kernel does: exact,
// and held to that. masked_fill's gradient for an x broadcast to a larger mask is a sum over
// the broadcast dims (double here, float in PyTorch). The softmax family differs in exp/log's
// last bit (vectorised in PyTorch, libm here) and in summation order. Each bound is at least
// 3x the largest error seen; a wrong index, diagonal, reduction or smoothing term is off by
// 1e-2 or more.
Tolerance tolerance_for(const std::string& op, DType dtype) {
  if (dtype == DType::f64) return {1e-12, 1e-12};
  if (op == "masked_fill") return {1e-6, 1e-6};
  if (op == "softmax" || op == "log_softmax" || op == "nll_loss" || op == "cross_entropy") return {2e-6, 2e-6};
  return {0, 0};
}

using Golden = golden_check::GoldenFile;

const Golden& golden() { return golden_check::golden_file("tensor_ops.safetensors"); }

// Tessera's outputs for a case, mirroring run_op in the script.
TensorList run_op(const json::Value& c, const std::map<std::string, Tensor>& in) {
  const std::string& op = c.at("op").as_string();
  auto option = [&](const char* key) { return c.at(key).as_int(); };
  Tensor x = in.at("input");
  if (c.find("permute") != nullptr) x = x.permute(shape_of(c.at("permute")));
  if (op == "masked_fill") return {x.masked_fill(in.at("mask"), c.at("value").as_double())};
  if (op == "tril") return {ts::tril(x, option("diagonal"))};
  if (op == "triu") return {x.triu(option("diagonal"))};
  if (op == "flip") return {ts::flip(x, shape_of(c.at("dims")))};
  if (op == "split") {
    if (c.find("sizes") != nullptr) return x.split(shape_of(c.at("sizes")), option("dim"));
    return ts::split(x, option("split_size"), option("dim"));
  }
  if (op == "chunk") return x.chunk(option("chunks"), option("dim"));
  if (op == "index_select") return {x.index_select(option("dim"), in.at("index"))};
  if (op == "gather") return {ts::gather(x, option("dim"), in.at("index"))};
  if (op == "scatter_add") return {x.scatter_add(option("dim"), in.at("index"), in.at("src"))};
  if (op == "topk") {
    auto [values, indices] = x.topk(option("k"), option("dim"), c.at("largest").as_bool());
    return {values, indices};
  }
  if (op == "cumsum") return {x.cumsum(option("dim"))};
  if (op == "softmax") return {ts::softmax(x, option("dim"))};
  if (op == "log_softmax") return {x.log_softmax(option("dim"))};
  if (op == "nll_loss" || op == "cross_entropy") {
    Tensor weight = c.at("weight").as_bool() ? in.at("weight") : Tensor();
    const ts::Reduction reduction = reduction_from(c.at("reduction").as_string());
    if (op == "nll_loss") {
      return {ts::nll_loss(x, in.at("target"), {.weight = weight, .reduction = reduction,
                                                .ignore_index = option("ignore_index")})};
    }
    return {ts::cross_entropy(x, in.at("target"),
                              {.weight = weight, .reduction = reduction, .ignore_index = option("ignore_index"),
                               .label_smoothing = c.at("label_smoothing").as_double()})};
  }
  const Tensor& y = in.at("other");
  if (op == "comparisons") return {x == y, x != y, x < y, x <= y, x > y, x >= y, (x > y).sum(), ts::where(x > y, x, y)};
  if (op == "logical") return {~x, x & y, x | y, x ^ y, ts::logical_and(x, y), x.sum({1}), x.cumsum(1), x == y};
  FAIL("unknown op " << op);
  return {};
}

void run_case(const json::Value& c) {
  const std::string& op = c.at("op").as_string();
  const DType dtype = *io::dtype_from_safetensors(c.at("dtype").as_string());
  golden_check::run_case_by_roles(golden(), c, op + " " + std::string(ts::dtype_name(dtype)), tolerance_for(op, dtype),
                                  [&](const std::map<std::string, Tensor>& inputs) { return run_op(c, inputs); });
}

}  // namespace

TEST_CASE("tensor ops golden file: every case the script writes") {
  const Golden& g = golden();
  CHECK(g.metadata.at("generator") == "tests/golden/make_tensor_ops_golden.py");
  // A regenerated file that lost a case fails here rather than silently testing less.
  const std::vector<std::string> floating = {
      "masked_fill_attention", "masked_fill_mask_larger", "tril_main", "tril_above", "triu_below",
      "triu_main_permuted", "split_sizes", "split_size", "chunk_last_dim", "index_select_repeated",
      "index_select_dim0", "gather_dim1", "gather_dim0_smaller_index", "scatter_add_dim0", "scatter_add_dim1",
      "topk_largest", "topk_smallest_dim0", "topk_all_permuted", "cumsum_long_rows", "cumsum_dim0",
      "softmax_dim0", "softmax_dim1", "softmax_last_permuted", "log_softmax_dim0_permuted", "log_softmax_dim2",
      "log_softmax_minus2", "nll_loss_3d_ignore_weight", "nll_loss_4d_none", "cross_entropy_smoothing",
      "cross_entropy_smoothing_weight_ignore", "cross_entropy_smoothing_sum", "cross_entropy_smoothing_none",
      "cross_entropy_4d_smoothing_weight_ignore", "cross_entropy_3d_ignore", "cross_entropy_1d", "comparisons",
      "flip_first_and_last", "flip_negative_permuted"};
  std::set<std::string> expected = {"cumsum_int64_i64", "logical_bool", "flip_int64_i64"};
  for (const std::string& name : floating) expected.insert({name + "_f32", name + "_f64"});
  std::set<std::string> cases;
  for (const json::Value& c : g.cases.as_array()) CHECK(cases.insert(c.at("name").as_string()).second);
  CHECK(cases == expected);
  // The bool results arrive as PyTorch wrote them (safetensors BOOL).
  CHECK(g.tensors.at("logical_bool/output_0").dtype() == DType::boolean);
  CHECK(g.tensors.at("comparisons_f32/output_2").dtype() == DType::boolean);
  CHECK(g.tensors.at("comparisons_f64/output_6").dtype() == DType::i64);
}

TEST_CASE("tensor ops golden: outputs and gradients match PyTorch") {
  for (const json::Value& c : golden().cases.as_array()) {
    CAPTURE(c.at("name").as_string());
    run_case(c);
  }
  golden_check::print_report();
}
