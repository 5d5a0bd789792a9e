// What backward nodes keep alive: only the tensors their formula reads (flashlight's rule),
// measured with the CPU allocator's live bytes. Each case builds an input that only the
// graph can keep (x = leaf * 1, then the handle is dropped), applies the op, and counts what
// stays allocated besides the leaf and the output.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <tessera/tessera.h>

namespace ts = tessera;
using ts::Tensor;

namespace {

constexpr int64_t kElements = 1 << 16;
constexpr int64_t kBytes = kElements * 4;  // one float32 activation

// Live bytes the graph of op(x) keeps beyond the leaf and the output, where x is an
// intermediate (its only other holder is dropped).
int64_t kept_beyond_output(const std::function<Tensor(const Tensor&)>& op) {
  Tensor leaf = (ts::rand({kElements}) + 0.5).requires_grad_();
  const int64_t before = ts::memory_stats().current_bytes;
  Tensor output;
  {
    Tensor x = leaf * 1.0;  // MulBackward by a scalar keeps nothing
    output = op(x);
  }
  return ts::memory_stats().current_bytes - before - static_cast<int64_t>(output.nbytes());
}

}  // namespace

TEST_CASE("unary ops keep their output (relu, exp, sigmoid, tanh, sqrt), their input (abs, log) or nothing (neg)") {
  ts::manual_seed(0);
  CHECK(kept_beyond_output([](const Tensor& x) { return ts::relu(x); }) == 0);
  CHECK(kept_beyond_output([](const Tensor& x) { return ts::exp(x); }) == 0);
  CHECK(kept_beyond_output([](const Tensor& x) { return ts::sigmoid(x); }) == 0);
  CHECK(kept_beyond_output([](const Tensor& x) { return ts::tanh(x); }) == 0);
  CHECK(kept_beyond_output([](const Tensor& x) { return ts::sqrt(x); }) == 0);
  CHECK(kept_beyond_output([](const Tensor& x) { return ts::abs(x); }) == kBytes);
  CHECK(kept_beyond_output([](const Tensor& x) { return ts::log(x); }) == kBytes);
  CHECK(kept_beyond_output([](const Tensor& x) { return ts::neg(x); }) == 0);
}

TEST_CASE("mul, div and pow keep an operand only for the other's gradient; linear keeps its input only for the weight's") {
  ts::manual_seed(0);
  Tensor constant = ts::rand({kElements});  // needs no gradient
  Tensor trained = ts::rand({kElements}).requires_grad_();
  // x * constant: x's gradient reads the constant (which the caller holds anyway), not x.
  CHECK(kept_beyond_output([&](const Tensor& x) { return x * constant; }) == 0);
  // x * trained: trained's gradient reads x.
  CHECK(kept_beyond_output([&](const Tensor& x) { return x * trained; }) == kBytes);
  // x / constant keeps nothing of x either; x / trained needs x for trained's gradient.
  CHECK(kept_beyond_output([&](const Tensor& x) { return x / constant; }) == 0);
  CHECK(kept_beyond_output([&](const Tensor& x) { return x / trained; }) == kBytes);
  // pow(x, constant): x's gradient reads x and the exponent; pow(constant, x): x's gradient
  // reads the output and the base, not x.
  Tensor positive = ts::rand({kElements}) + 0.5;
  CHECK(kept_beyond_output([&](const Tensor& x) { return ts::pow(x, constant); }) == kBytes);
  CHECK(kept_beyond_output([&](const Tensor& x) { return ts::pow(positive, x); }) == 0);

  // A frozen linear layer keeps no activation; a trained one keeps its input.
  ts::nn::Linear layer(256, 256);
  Tensor weight = layer.weight, bias = layer.bias;
  (void)weight.data_ptr();  // materialised before measuring
  (void)bias.data_ptr();
  auto through_layer = [&](const Tensor& x) { return ts::linear(x.view({256, 256}), weight, bias); };
  CHECK(kept_beyond_output(through_layer) == kBytes);
  weight.requires_grad_(false);
  bias.requires_grad_(false);
  CHECK(kept_beyond_output(through_layer) == 0);
}

TEST_CASE("gradients are unchanged by what is kept") {
  ts::manual_seed(1);
  Tensor a = (ts::rand({5}, {.dtype = ts::DType::f64}) + 0.5).requires_grad_();
  Tensor b = ts::rand({5}, {.dtype = ts::DType::f64}).requires_grad_();
  Tensor loss = (ts::log(a) * b + ts::sqrt(a) / b - ts::abs(a).neg()).sum();
  loss.backward();
  for (int64_t i = 0; i < 5; ++i) {
    const double x = a.at<double>({i}), y = b.at<double>({i});
    CHECK(a.grad().at<double>({i}) == doctest::Approx(y / x + 0.5 / std::sqrt(x) / y + 1.0).epsilon(1e-12));
    CHECK(b.grad().at<double>({i}) == doctest::Approx(std::log(x) - std::sqrt(x) / (y * y)).epsilon(1e-12));
  }
  // pow with one side constant: the other side's gradient alone, from what was kept.
  Tensor base = a.detach().requires_grad_(), exponent = b.detach().requires_grad_();
  ts::pow(base, b.detach()).sum().backward();
  ts::pow(a.detach(), exponent).sum().backward();
  for (int64_t i = 0; i < 5; ++i) {
    const double x = a.at<double>({i}), y = b.at<double>({i});
    CHECK(base.grad().at<double>({i}) == doctest::Approx(y * std::pow(x, y - 1.0)).epsilon(1e-12));
    CHECK(exponent.grad().at<double>({i}) == doctest::Approx(std::pow(x, y) * std::log(x)).epsilon(1e-12));
  }
}

TEST_CASE("ops recorded through recording.h's helpers record and keep nothing when nothing needs a gradient") {
  // The ops that record through record_unary, record_normalization and record_pick check
  // needs_grad before building their closures: under no_grad, or with no input that
  // requires grad, nothing they would have saved (batch_norm's and layer_norm's statistics,
  // topk's and max's indices) outlives the op.
  ts::manual_seed(2);
  Tensor weight = ts::rand({256}).requires_grad_(), bias = ts::rand({256}).requires_grad_();
  Tensor mask = ts::rand({kElements}) > 0.5;
  Tensor picks = ts::randint(0, 256, {16}), gather_index = ts::randint(0, 256, {256, 16});
  const auto rows = [](const Tensor& x) { return x.view({256, 256}); };
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> ops = {
      {"gelu", [](const Tensor& x) { return ts::gelu(x); }},
      {"erf", [](const Tensor& x) { return ts::erf(x); }},
      {"exp", [](const Tensor& x) { return ts::exp(x); }},
      {"pow", [](const Tensor& x) { return ts::pow(x, 3.0); }},
      {"x / 2", [](const Tensor& x) { return x / 2.0; }},
      {"2 / x", [](const Tensor& x) { return 2.0 / x; }},
      {"sum", [&](const Tensor& x) { return ts::sum(rows(x), {1}); }},
      {"amax", [&](const Tensor& x) { return ts::amax(rows(x), {1}); }},
      {"max", [&](const Tensor& x) { return std::get<0>(ts::max(rows(x), 1)); }},
      {"topk", [&](const Tensor& x) { return std::get<0>(ts::topk(rows(x), 4)); }},
      {"cumsum", [](const Tensor& x) { return ts::cumsum(x, 0); }},
      {"masked_fill", [&](const Tensor& x) { return ts::masked_fill(x, mask, 0.0); }},
      {"tril", [&](const Tensor& x) { return ts::tril(rows(x)); }},
      {"index_select", [&](const Tensor& x) { return ts::index_select(rows(x), 1, picks); }},
      {"gather", [&](const Tensor& x) { return ts::gather(rows(x), 1, gather_index); }},
      {"layer_norm", [&](const Tensor& x) { return ts::layer_norm(rows(x), {256}, weight, bias); }},
      {"batch_norm", [&](const Tensor& x) { return ts::batch_norm(rows(x), {}, {}, weight, bias, true); }},
  };
  for (const auto& [name, op] : ops) {
    CAPTURE(name);
    Tensor out;
    // Grad mode off, input and weights requiring grad.
    CHECK(kept_beyond_output([&](const Tensor& x) {
            ts::NoGradGuard no_grad;
            out = op(x);
            return out;
          }) == 0);
    CHECK_FALSE(out.requires_grad());
    CHECK(out.grad_fn() == nullptr);
    // Grad mode on: recorded for an input that requires grad, not for one that does not.
    Tensor leaf = (ts::rand({kElements}) + 0.5).requires_grad_();
    CHECK(op(leaf).grad_fn() != nullptr);
    weight.requires_grad_(false);
    bias.requires_grad_(false);
    Tensor plain = op(leaf.detach());
    CHECK_FALSE(plain.requires_grad());
    CHECK(plain.grad_fn() == nullptr);
    weight.requires_grad_();
    bias.requires_grad_();
  }
}
