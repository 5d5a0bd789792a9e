// Scaled dot-product attention: the blocked kernel against the unfused formula built from
// differentiable ops (softmax(q k^T scale + mask) -> dropout() -> matmul), against PyTorch's
// math attention (tests/golden/attention.safetensors), its dropout bits, its memory, and
// the errors it gives.
//
// Tolerances. float64: 1e-12 absolute on values of order 1. The kernel and the formula do
// the same arithmetic in another order (online rescaling, tiled GEMMs, a different exp
// path), so they differ by a few ulps of the largest intermediate, well below 1e-13 here.
// float32 against float64: 2e-5, the float32 rounding of O(1) softmax weights and sums
// of up to a few hundred products (about 1e-6 measured), with room for libm differences.
#include <doctest/doctest.h>

#include <cmath>
#include <iomanip>
#include <limits>
#include <tessera/tensor/attention_geometry.h>
#include <tessera/tensor/native.h>
#include <tessera/tessera.h>

#include "test_support.h"

namespace ts = tessera;
namespace native = tessera::native;
namespace nn = tessera::nn;
using ts::DType;
using ts::Shape;
using ts::Tensor;
using test_support::contains;
using test_support::error_of;

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

Tensor uniform(const Shape& shape, uint64_t seed, DType dtype = DType::f64, double low = -1, double high = 1) {
  ts::Generator gen(seed);
  return (ts::rand(shape, gen, {.dtype = DType::f64}) * (high - low) + low).to(dtype).detach();
}

Tensor boolean(const Tensor& t) { return ts::ne(t, ts::zeros({}, {.dtype = t.dtype()})); }

// keep[i, j] = j <= i: torch.ones(L, S).tril() as a mask.
Tensor causal_keep(int64_t queries, int64_t keys) {
  return ts::ge(ts::arange(queries).view({queries, 1}), ts::arange(keys));
}

// A boolean mask broadcastable as `shape`, about three quarters true, with row 2 (of the
// second-to-last dim) all false: a query with no key.
Tensor random_keep(const Shape& shape, uint64_t seed) {
  Tensor keep = ts::lt(uniform(shape, seed, DType::f64, 0, 1), ts::full({}, 0.75, {.dtype = DType::f64}));
  Tensor row = keep.narrow(-2, 2, 1);
  ts::NoGradGuard no_grad;
  row.zero_();
  return keep;
}

// The unfused formula, from differentiable ops, with the kernel's conventions (rows with no
// key give 0; dropout is dropout() of the weights [..., L, S] under the same key).
Tensor reference(const Tensor& q, const Tensor& k, const Tensor& v, const native::AttentionOptions& o) {
  const ts::TensorOptions like{.dtype = q.dtype()};
  Tensor scores = ts::matmul(q, k.transpose(-2, -1)) * o.scale;
  const Tensor minus_infinity = ts::full({}, -kInfinity, like), zero = ts::zeros({}, like);
  if (o.is_causal) scores = ts::where(causal_keep(q.size(-2), k.size(-2)), scores, minus_infinity);
  if (o.attn_mask.defined()) {
    scores = native::is_boolean_mask(o.attn_mask.dtype()) ? ts::where(o.attn_mask, scores, minus_infinity)
                                                          : scores + o.attn_mask;
  }
  const Tensor no_key = ts::eq(scores.detach().amax({-1}, true), minus_infinity);
  Tensor weights = ts::where(no_key, zero, ts::softmax(ts::where(no_key, zero, scores), -1));
  if (o.dropout_p > 0) weights = ts::dropout(weights, o.dropout_p, true, o.dropout_key);
  return ts::matmul(weights, v);
}

// The largest |a - b| (infinite when shapes differ or a NaN appears).
double max_difference(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.sizes() != b.sizes()) return kInfinity;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = std::abs(x[i] - y[i]);
    if (!(d <= worst)) worst = std::isnan(d) ? kInfinity : d;
  }
  return worst;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && a.dtype() == b.dtype() && a.to_vector<double>() == b.to_vector<double>();
}

struct Config {
  std::string name;
  Shape batch;
  int64_t queries, keys, head_dim, value_dim;
  std::string mask = "none";  // none, bool [L, S], bool per batch [N0, 1, L, S], float [N.., L, S]
  bool causal = false;
  double scale = 0;           // 0: 1 / sqrt(E)
  double dropout = 0;
};

Shape with(Shape batch, std::initializer_list<int64_t> last) {
  batch.insert(batch.end(), last);
  return batch;
}

struct Problem {
  Tensor q, k, v, grad_output;
  native::AttentionOptions options;
};

Problem make_problem(const Config& c, DType dtype, uint64_t seed) {
  Problem p;
  p.q = uniform(with(c.batch, {c.queries, c.head_dim}), seed, dtype, -2, 2);
  p.k = uniform(with(c.batch, {c.keys, c.head_dim}), seed + 1, dtype, -2, 2);
  p.v = uniform(with(c.batch, {c.keys, c.value_dim}), seed + 2, dtype);
  p.grad_output = uniform(with(c.batch, {c.queries, c.value_dim}), seed + 3, dtype);
  native::AttentionOptions& o = p.options;
  o.is_causal = c.causal;
  o.scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  o.dropout_p = c.dropout;
  o.dropout_key = {.seed = 11, .stream = 12, .step = 13, .first_row = 5};
  if (c.mask == "bool") o.attn_mask = random_keep({c.queries, c.keys}, seed + 4);
  if (c.mask == "bool per batch") o.attn_mask = random_keep({c.batch.front(), 1, c.queries, c.keys}, seed + 4);
  if (c.mask == "float") {
    Tensor drop = ts::lt(uniform(with(c.batch, {c.queries, c.keys}), seed + 5, DType::f64, 0, 1),
                         ts::full({}, 0.2, {.dtype = DType::f64}));
    o.attn_mask = ts::where(drop, ts::full({}, -kInfinity, {.dtype = dtype}),
                            uniform(with(c.batch, {c.queries, c.keys}), seed + 6, dtype));
  }
  return p;
}

struct Result {
  Tensor out, dq, dk, dv;
};

Result run_kernel(const Problem& p, int64_t query_block = 0, int64_t key_block = 0) {
  native::AttentionOptions o = p.options;
  o.query_block = query_block;
  o.key_block = key_block;
  auto [out, lse] = native::scaled_dot_product_attention(p.q, p.k, p.v, o);
  auto [dq, dk, dv] = native::scaled_dot_product_attention_backward(p.grad_output, p.q, p.k, p.v, out, lse, o);
  return {out, dq, dk, dv};
}

Result run_reference(const Problem& p) {
  Tensor q = p.q.clone().requires_grad_(), k = p.k.clone().requires_grad_(), v = p.v.clone().requires_grad_();
  Tensor out = reference(q, k, v, p.options);
  out.backward(p.grad_output.to(out.dtype()));
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

void check_result(const Result& actual, const Result& expected, double tolerance) {
  CHECK(max_difference(actual.out, expected.out) <= tolerance);
  CHECK(max_difference(actual.dq, expected.dq) <= tolerance);
  CHECK(max_difference(actual.dk, expected.dk) <= tolerance);
  CHECK(max_difference(actual.dv, expected.dv) <= tolerance);
}

std::vector<Config> configs() {
  return {
      {"4-D, L < S", {2, 3}, 7, 11, 5, 4},
      {"custom scale, Ev > E", {1, 2}, 6, 6, 3, 7, "none", false, 0.8},
      {"causal, L < S", {2, 1}, 5, 9, 4, 3, "none", true},
      {"causal, L > S", {2, 1}, 9, 5, 4, 3, "none", true},
      {"causal, square", {1, 2}, 13, 13, 6, 6, "none", true},
      {"boolean [L, S] mask with an empty row", {2, 2}, 6, 9, 4, 4, "bool"},
      {"boolean [B, 1, L, S] mask", {2, 3}, 5, 7, 4, 3, "bool per batch"},
      {"float mask with -inf, custom scale", {2, 2}, 7, 8, 5, 5, "float", false, 0.4},
      {"3-D inputs, float mask", {3}, 6, 10, 4, 2, "float"},
      {"2-D inputs", {}, 5, 7, 3, 4},
      {"dropout", {2, 2}, 7, 11, 5, 4, "none", false, 0, 0.3},
      {"dropout, causal", {2, 1}, 9, 9, 4, 4, "none", true, 0, 0.2},
      {"dropout, boolean mask", {2, 2}, 6, 9, 4, 4, "bool", false, 0, 0.5},
  };
}

}  // namespace

TEST_CASE("attention matches the unfused formula, output and gradients, in float64 and float32") {
  uint64_t seed = 100;
  for (const Config& c : configs()) {
    CAPTURE(c.name);
    const Problem p = make_problem(c, DType::f64, seed);
    const Result expected = run_reference(p);
    // Default tiles (one tile here), then tiles of 3 queries x 4 keys: partial tiles,
    // several rescalings per row, causal tiles skipped and cut.
    check_result(run_kernel(p), expected, 1e-12);
    check_result(run_kernel(p, 3, 4), expected, 1e-12);
    // float32 on the same values, against the float64 formula.
    const Problem p32 = make_problem(c, DType::f32, seed);
    check_result(run_kernel(p32, 3, 4), expected, 2e-5);
    check_result(run_kernel(p32), expected, 2e-5);
    seed += 10;
  }
}

TEST_CASE("attention through autograd: the functional, its default scale and its backward node") {
  const Problem p = make_problem({"plain", {2, 2}, 5, 6, 4, 3}, DType::f64, 7);
  Tensor q = p.q.clone().requires_grad_(), k = p.k.clone().requires_grad_(), v = p.v.clone().requires_grad_();
  Tensor out = ts::scaled_dot_product_attention(q, k, v);
  REQUIRE(out.grad_fn());
  CHECK(out.grad_fn()->name() == "ScaledDotProductAttentionBackward");
  out.backward(p.grad_output);
  const Result expected = run_reference(p);  // scale 1 / sqrt(4)
  check_result({out.detach(), q.grad(), k.grad(), v.grad()}, expected, 1e-12);
  // An explicit 1 / sqrt(E) is the default, bit for bit.
  CHECK(bit_equal(ts::scaled_dot_product_attention(p.q, p.k, p.v, {.scale = 0.5}), out.detach()));
  // The log-sum-exp saved for the backward is the masked, scaled scores' logsumexp.
  auto [unused, lse] = native::scaled_dot_product_attention(p.q, p.k, p.v, p.options);
  Tensor scores = ts::matmul(p.q, p.k.transpose(-2, -1)) * 0.5;
  Tensor row_max = scores.amax({-1}, true);
  Tensor expected_lse = (row_max + (scores - row_max).exp().sum({-1}, true).log()).squeeze(-1);
  CHECK(max_difference(lse, expected_lse) <= 1e-13);
}

TEST_CASE("q, k, v as transposed [B, T, H, D] views give the contiguous result bit for bit") {
  for (DType dtype : {DType::f32, DType::f64}) {
    CAPTURE(dtype);
    // GPT code: x [B, T, C] -> view [B, T, H, D] -> transpose(1, 2) -> [B, H, T, D].
    const int64_t B = 2, T = 70, H = 3, D = 16;
    Tensor q = uniform({B, T, H, D}, 1, dtype).transpose(1, 2), k = uniform({B, T, H, D}, 2, dtype).transpose(1, 2);
    Tensor v = uniform({B, T, H, D}, 3, dtype).transpose(1, 2), grad = uniform({B, H, T, D}, 4, dtype);
    REQUIRE_FALSE(q.is_contiguous());
    for (bool causal : {false, true}) {
      native::AttentionOptions o{.is_causal = causal, .scale = 0.25};
      const Result strided = run_kernel({q, k, v, grad, o});
      const Result dense = run_kernel({q.contiguous(), k.contiguous(), v.contiguous(), grad, o});
      CHECK(bit_equal(strided.out, dense.out));
      CHECK(bit_equal(strided.dq, dense.dq));
      CHECK(bit_equal(strided.dk, dense.dk));
      CHECK(bit_equal(strided.dv, dense.dv));
      // And the gradient of a transposed view has the view's shape, as autograd needs.
      CHECK(strided.dq.sizes() == q.sizes());
    }
  }
}

TEST_CASE("the result does not depend on the thread count or on which backward pass runs") {
  // N = 1 head: at 2 threads the backward runs its two passes (dK, dV by key block, then dQ);
  // at 1 thread, one pass. N = 3 heads: one pass per head at any thread count.
  const int threads = ts::get_num_threads();
  for (const Shape& batch : {Shape{1}, Shape{3}}) {
    CAPTURE(batch.front());
    Config c{"threads", batch, 150, 140, 32, 24, "none", true, 0, 0.1};
    const Problem p = make_problem(c, DType::f32, 3);
    ts::set_num_threads(1);
    const Result one = run_kernel(p, 32, 48);
    ts::set_num_threads(2);
    const Result two = run_kernel(p, 32, 48);
    ts::set_num_threads(threads);
    CHECK(bit_equal(one.out, two.out));
    CHECK(bit_equal(one.dq, two.dq));
    CHECK(bit_equal(one.dk, two.dk));
    CHECK(bit_equal(one.dv, two.dv));
  }
}

TEST_CASE("a query whose every key is masked gives 0 and zero gradients (PyTorch >= 2.5), not NaN") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Problem p = make_problem({"masked", {1, 2}, 4, 6, 3, 3}, dtype, 9);
    Tensor keep = ts::ones({4, 6}, {.dtype = DType::f64});
    ts::NoGradGuard no_grad;
    keep.narrow(0, 1, 1).zero_();  // query 1 sees nothing
    p.options.attn_mask = boolean(keep);
    const Result r = run_kernel(p);
    auto [unused, lse] = native::scaled_dot_product_attention(p.q, p.k, p.v, p.options);
    CHECK(r.out.select(-2, 1).abs().sum().item<double>() == 0.0);
    CHECK(r.dq.select(-2, 1).abs().sum().item<double>() == 0.0);
    CHECK(std::isfinite(r.out.sum().item<double>()));
    CHECK(std::isfinite(r.dk.sum().item<double>()));
    CHECK(std::isfinite(r.dv.sum().item<double>()));
    CHECK(lse.select(-1, 1).to_vector<double>() == std::vector<double>{-kInfinity, -kInfinity});
    // An additive -inf row is the same, and so are no keys at all (S = 0).
    p.options.attn_mask = ts::where(p.options.attn_mask, ts::zeros({}, {.dtype = dtype}),
                                    ts::full({}, -kInfinity, {.dtype = dtype}));
    CHECK(bit_equal(run_kernel(p).out, r.out));
    Tensor none = ts::zeros({1, 2, 0, 3}, {.dtype = dtype});
    auto [empty_out, empty_lse] =
        native::scaled_dot_product_attention(p.q, none, ts::zeros({1, 2, 0, 5}, {.dtype = dtype}), {});
    CHECK(empty_out.sizes() == Shape{1, 2, 4, 5});
    CHECK(empty_out.abs().sum().item<double>() == 0.0);
  }
}

TEST_CASE("NaN in a query or key reaches the output, as in PyTorch (not hidden as a masked row)") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Problem p = make_problem({"nan", {1, 1}, 3, 300, 4, 2}, dtype, 15);
    ts::NoGradGuard no_grad;
    p.q.narrow(-2, 1, 1).fill_(NAN);  // query 1: every score NaN
    p.k.narrow(-2, 280, 1).fill_(NAN);  // key 280 (second key tile): NaN for every query
    const Result r = run_kernel(p);
    for (int64_t i = 0; i < 3; ++i) CHECK(std::isnan(r.out.select(-2, i).sum().item<double>()));
  }
}

TEST_CASE("dropout: the weights dropout() drops in the weights tensor, drawn again identically in backward") {
  const Config c{"dropout", {2, 3}, 20, 33, 8, 8, "none", true, 0, 0.25};
  const Problem p = make_problem(c, DType::f32, 21);
  // The same key twice: bit-identical outputs and gradients (activation checkpointing
  // recomputes the forward and must get the same dropped weights).
  const Result first = run_kernel(p), again = run_kernel(p, 5, 7);
  CHECK(bit_equal(first.out, run_kernel(p).out));
  CHECK(bit_equal(first.dq, run_kernel(p).dq));
  CHECK(max_difference(first.out, again.out) <= 1e-5);  // other tiles, same bits dropped
  // Against the unfused form with dropout() on the weights: the masks agree element for element.
  check_result(first, run_reference(p), 1e-5);
  // Another step, another mask.
  Problem next = p;
  next.options.dropout_key.step += 1;
  CHECK(max_difference(run_kernel(next).out, first.out) > 1e-3);
}

TEST_CASE("dropout: a fraction p of the weights is dropped, the rest scaled by 1 / (1 - p)") {
  // q = 0 makes every weight 1 / S; v = I makes the output the dropped weights themselves.
  const int64_t B = 4, H = 2, L = 64, S = 64;
  for (double p : {0.1, 0.5}) {
    CAPTURE(p);
    Tensor q = ts::zeros({B, H, L, 8}), k = uniform({B, H, S, 8}, 5, DType::f32);
    Tensor eye = ts::where(ts::eq(ts::arange(S).view({S, 1}), ts::arange(S)), ts::ones({}), ts::zeros({}));
    Tensor v = eye.expand({B, H, S, S}).contiguous();
    auto [out, lse] = native::scaled_dot_product_attention(q, k, v, {.dropout_p = p, .scale = 1.0,
                                                                      .dropout_key = {.seed = 3, .step = 4}});
    const std::vector<float> values = out.to_vector<float>();
    const float kept_value = static_cast<float>(1.0 / S) * static_cast<float>(1.0 / (1.0 - p));
    int64_t kept = 0;
    for (float x : values) {
      CHECK((x == 0.0f || std::abs(x - kept_value) <= 1e-6f * kept_value));
      kept += x != 0.0f;
    }
    // 32768 Bernoulli(1 - p) draws: 5 standard deviations at most (sd <= 0.003).
    const double fraction = static_cast<double>(kept) / static_cast<double>(values.size());
    CHECK(std::abs(fraction - (1 - p)) <= 5 * std::sqrt(p * (1 - p) / static_cast<double>(values.size())));
  }
  // p = 1 drops everything; p = 0 is no dropout at all.
  const Problem all = make_problem({"p=1", {1, 1}, 4, 4, 2, 2, "none", false, 0, 1.0}, DType::f64, 1);
  const Result dropped = run_kernel(all);
  CHECK(dropped.out.abs().sum().item<double>() == 0.0);
  CHECK(dropped.dq.abs().sum().item<double>() == 0.0);
  Problem none = all;
  none.options.dropout_p = 0;
  CHECK(bit_equal(run_kernel(none).out, ts::scaled_dot_product_attention(all.q, all.k, all.v,
                                                                        {.scale = none.options.scale})));
}

TEST_CASE("nn::scaled_dot_product_attention drops what its Dropout module drops in the unfused form") {
  struct Attention : nn::Module {
    nn::Dropout attn_dropout{0.3};
    Attention() { register_modules({{"attn_dropout", attn_dropout}}); }
  } model;
  const Problem p = make_problem({"module", {2, 2}, 6, 6, 4, 4}, DType::f64, 31);
  auto unfused = [&] {  // Hugging Face GPT-2's eager path: softmax, attn_dropout, matmul
    Tensor weights = ts::softmax(ts::matmul(p.q, p.k.transpose(-2, -1)) * 0.5 +
                                     ts::where(causal_keep(6, 6), ts::zeros({}, {.dtype = DType::f64}),
                                               ts::full({}, -kInfinity, {.dtype = DType::f64})),
                                 -1);
    return ts::matmul(model.attn_dropout(weights), p.v);
  };
  {
    nn::BatchScope scope({.seed = 5, .step = 17, .first_row = 8});
    Tensor fused = nn::scaled_dot_product_attention(p.q, p.k, p.v, model.attn_dropout, {.is_causal = true});
    CHECK(max_difference(fused, unfused()) <= 1e-12);
    CHECK(max_difference(fused, ts::scaled_dot_product_attention(p.q, p.k, p.v, {.is_causal = true})) > 1e-3);
  }
  model.eval();
  CHECK(bit_equal(nn::scaled_dot_product_attention(p.q, p.k, p.v, model.attn_dropout, {.is_causal = true}),
                  ts::scaled_dot_product_attention(p.q, p.k, p.v, {.is_causal = true})));
}

TEST_CASE("a batch split across ranks gives each sample the bits of the whole batch, dropout included") {
  // What FSDP's parity at any world size and activation checkpointing need: samples 0-1 and
  // 2-3 computed apart (two ranks; BatchScope's first_row is each rank's first global row)
  // give the outputs and gradients of the batch of 4 bit for bit, the dropped weights too.
  struct Attention : nn::Module {
    nn::Dropout attn_dropout{0.2};
    Attention() { register_modules({{"attn_dropout", attn_dropout}}); }
  } model;
  const int64_t B = 4, H = 3, T = 70, D = 16;
  const Tensor q = uniform({B, T, H, D}, 61, DType::f32), k = uniform({B, T, H, D}, 62, DType::f32);
  const Tensor v = uniform({B, T, H, D}, 63, DType::f32), grad_output = uniform({B, H, T, D}, 64, DType::f32);
  struct Run {
    Tensor out, dq, dk, dv;
  };
  auto run = [&](int64_t first, int64_t rows) {
    std::vector<Tensor> leaves;
    for (const Tensor& t : {q, k, v}) leaves.push_back(t.narrow(0, first, rows).clone().requires_grad_());
    nn::BatchScope scope({.seed = 9, .step = 3, .first_row = first});
    Tensor out = nn::scaled_dot_product_attention(leaves[0].transpose(1, 2), leaves[1].transpose(1, 2),
                                                  leaves[2].transpose(1, 2), model.attn_dropout, {.is_causal = true});
    out.backward(grad_output.narrow(0, first, rows));
    return Run{out.detach(), leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
  };
  const Run whole = run(0, B), first = run(0, 2), second = run(2, 2);
  CHECK(bit_equal(whole.out, ts::cat({first.out, second.out}, 0)));
  CHECK(bit_equal(whole.dq, ts::cat({first.dq, second.dq}, 0)));
  CHECK(bit_equal(whole.dk, ts::cat({first.dk, second.dk}, 0)));
  CHECK(bit_equal(whole.dv, ts::cat({first.dv, second.dv}, 0)));
  CHECK(bit_equal(whole.out, run(0, B).out));  // recomputed (checkpointing): the same bits
  // The second half at first_row 0 instead of 2 draws other masks.
  nn::BatchScope scope({.seed = 9, .step = 3, .first_row = 0});
  const Tensor misplaced = nn::scaled_dot_product_attention(
      q.narrow(0, 2, 2).transpose(1, 2), k.narrow(0, 2, 2).transpose(1, 2), v.narrow(0, 2, 2).transpose(1, 2),
      model.attn_dropout, {.is_causal = true});
  CHECK(max_difference(misplaced, second.out) > 1e-3);
}

TEST_CASE("a floating mask that requires grad gets its gradient (the unblocked path)") {
  const Problem p = make_problem({"bias", {2, 2}, 5, 7, 4, 3, "float"}, DType::f64, 41);
  Tensor bias = p.options.attn_mask.clone().requires_grad_();
  Tensor q = p.q.clone().requires_grad_();
  Tensor out = ts::scaled_dot_product_attention(q, p.k, p.v, {.attn_mask = bias, .scale = p.options.scale});
  out.backward(p.grad_output);
  Tensor bias_ref = p.options.attn_mask.clone().requires_grad_(), q_ref = p.q.clone().requires_grad_();
  native::AttentionOptions o = p.options;
  o.attn_mask = bias_ref;
  Tensor expected = reference(q_ref, p.k, p.v, o);
  expected.backward(p.grad_output);
  CHECK(max_difference(out, expected) <= 1e-12);
  CHECK(max_difference(q.grad(), q_ref.grad()) <= 1e-12);
  CHECK(max_difference(bias.grad(), bias_ref.grad()) <= 1e-12);
  CHECK(bias.grad().abs().sum().item<double>() > 0.1);
  CHECK(std::isfinite(bias.grad().sum().item<double>()));
}

TEST_CASE("attention errors name what is wrong") {
  Tensor q = ts::zeros({2, 3, 4, 8}), k = ts::zeros({2, 3, 5, 8}), v = ts::zeros({2, 3, 5, 6});
  auto message = [&](const Tensor& qq, const Tensor& kk, const Tensor& vv, ts::ScaledDotProductAttentionOptions o) {
    return error_of([&] { ts::scaled_dot_product_attention(qq, kk, vv, o); });
  };
  CHECK(contains(message(q, ts::zeros({2, 3, 5, 7}), v, {}), "key [2, 3, 5, 7]"));
  CHECK(contains(message(q, k, ts::zeros({2, 3, 4, 6}), {}), "value [2, 3, 4, 6]"));
  CHECK(contains(message(q, ts::zeros({2, 1, 5, 8}), v, {}), "equal leading dims"));
  CHECK(contains(message(q, ts::zeros({3, 5, 8}), v, {}), "same number of dims"));
  CHECK(contains(message(q, k, v, {.attn_mask = ts::zeros({4, 4})}), "does not broadcast"));
  CHECK(contains(message(q, k, v, {.attn_mask = ts::zeros({4, 5}, {.dtype = DType::f64})}), "boolean or of the query's dtype"));
  CHECK(contains(message(q, k, v, {.attn_mask = ts::zeros({4, 5}, {.dtype = DType::u8})}), "got uint8"));
  CHECK(contains(message(q, k, v, {.attn_mask = ts::zeros({4, 5}), .is_causal = true}), "together with is_causal"));
  CHECK(contains(message(q, k, v, {.dropout_p = 1.5}), "probability must be in [0, 1]"));
  CHECK(contains(message(q, k.to(DType::f64), v, {}), "float32 and float64"));
  CHECK(contains(message(q.to(DType::i64), k.to(DType::i64), v.to(DType::i64), {}), "expected floating"));
}

TEST_CASE("peak extra memory is O(T): T = 1024 and 2048, no [T, T] matrix") {
  // One forward and backward, causal, [1, 2, T, 64] float32. The extra bytes are the output,
  // lse, the upstream gradient, the three gradients (six tensors of an operand's size at
  // most) and, per thread, the tiles (a constant) and one head's K^T, V^T, dK^T and dV^T
  // (four [T, 64] arrays): all linear in T. One [T, T] float32 matrix per head would alone
  // be 2 x 16 MiB at T = 2048; the unfused formula keeps several.
  const int64_t heads = 2;
  auto extra_bytes = [&](int64_t T) {
    Tensor q = uniform({1, heads, T, 64}, 1, DType::f32).requires_grad_();
    Tensor k = uniform({1, heads, T, 64}, 2, DType::f32).requires_grad_();
    Tensor v = uniform({1, heads, T, 64}, 3, DType::f32).requires_grad_();
    const int64_t before = ts::memory_stats().current_bytes;
    ts::reset_peak_memory();
    ts::scaled_dot_product_attention(q, k, v, {.is_causal = true}).sum().backward();
    return ts::memory_stats().peak_bytes - before;
  };
  const int64_t at_1024 = extra_bytes(1024), at_2048 = extra_bytes(2048);
  const double operand = heads * 2048 * 64 * 4, head_arrays = 4 * 2048 * 64 * 4;
  const double bound = 6 * operand + ts::get_num_threads() * (head_arrays + (1 << 20));
  MESSAGE("peak extra bytes: T = 1024: " << at_1024 << ", T = 2048: " << at_2048 << " (bound " << bound << ")");
  CHECK(at_2048 <= 2.1 * static_cast<double>(at_1024));  // linear (the tiles are a constant)
  CHECK(static_cast<double>(at_2048) <= bound);
  CHECK(at_2048 < heads * 2048 * 2048 * 4);  // less than the weights alone
}

TEST_CASE("golden: PyTorch's math attention (torch 1.13, written out), float32 and float64") {
  const char* dir = std::getenv("TESSERA_SOURCE_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "TESSERA_SOURCE_DIR is not set (meson test sets it)");
  const std::string path = std::string(dir) + "/tests/golden/attention.safetensors";
  const ts::StateDict tensors = ts::io::load(path);
  const ts::io::Metadata metadata = ts::io::load_metadata(path);
  CHECK(metadata.at("generator") == "tests/golden/make_attention_golden.py");
  const ts::io::json::Value cases = ts::io::json::parse(metadata.at("cases"));
  REQUIRE(cases.as_array().size() == 22);
  double worst32 = 0, worst64 = 0;
  for (const auto& c : cases.as_array()) {
    const std::string name = c.at("name").as_string();
    CAPTURE(name);
    auto stored = [&](const std::string& role) { return tensors.at(name + "/" + role); };
    const bool transposed = c.at("transposed").as_bool();
    auto leaf = [&](const std::string& role) { return stored(role).clone().requires_grad_(); };
    Tensor q = leaf("q"), k = leaf("k"), v = leaf("v");
    ts::ScaledDotProductAttentionOptions o{.is_causal = c.at("is_causal").as_bool()};
    if (!c.at("scale").is_null()) o.scale = c.at("scale").as_double();
    const std::string mask = c.at("mask").as_string();
    if (mask != "none") o.attn_mask = stored("mask");
    CHECK((mask != "bool" || o.attn_mask.dtype() == DType::boolean));
    auto view = [&](const Tensor& t) { return transposed ? t.transpose(1, 2) : t; };
    Tensor out = ts::scaled_dot_product_attention(view(q), view(k), view(v), o);
    out.backward(stored("grad_output"));
    // float64: 1e-12 relative to the values' scale (up to ~5 here); float32: 1e-5 on the
    // same, PyTorch's and Tessera's float32 roundings of O(1) weights and short sums.
    const bool f32 = q.dtype() == DType::f32;
    const double tolerance = f32 ? 1e-5 : 1e-12;
    double& worst = f32 ? worst32 : worst64;
    for (const auto& [role, actual] : {std::pair<std::string, Tensor>{"output", out}, {"grad_q", q.grad()},
                                       {"grad_k", k.grad()}, {"grad_v", v.grad()}}) {
      CAPTURE(role);
      const Tensor expected = stored(role);
      const double scale = std::max(1.0, expected.abs().max().item<double>());
      const double difference = max_difference(actual, expected) / scale;
      CHECK(difference <= tolerance);
      worst = std::max(worst, difference);
    }
  }
  MESSAGE("largest difference from PyTorch, relative to each tensor's largest value: float32 " << worst32
                                                                                             << ", float64 " << worst64);
}
