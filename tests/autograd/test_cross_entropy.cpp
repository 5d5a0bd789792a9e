// cross_entropy without label smoothing is one node (CrossEntropyBackward) that saves only
// the log-probabilities and writes its gradient over them: the same bits as log_softmax and
// nll_loss recorded apart, for every option it takes, with one [N, C] buffer in its
// backward where the two nodes hold three. (Label smoothing keeps the composition; the f64
// gradient checks are in test_gradcheck_table.cpp.)
#include <doctest/doctest.h>

#include <cstring>
#include <tessera/tessera.h>

namespace ts = tessera;
using ts::DType;
using ts::Shape;
using ts::Tensor;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor ca = a.detach().contiguous(), cb = b.detach().contiguous();
  return ca.numel() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

struct Case {
  const char* name;
  Shape shape;
  std::vector<int64_t> targets;  // shape: shape without the class dim
  ts::Reduction reduction = ts::Reduction::mean;
  bool weighted = false;
  int64_t ignore_index = -100;
};

Shape target_shape(const Shape& shape) {
  if (shape.size() == 1) return {};
  Shape out{shape[0]};
  out.insert(out.end(), shape.begin() + 2, shape.end());
  return out;
}

}  // namespace

TEST_CASE("cross_entropy's fused node: loss and gradient bit-identical to log_softmax + nll_loss") {
  ts::Generator gen(13);
  std::vector<int64_t> many(300);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int64_t>((i * 7919) % 1000);
  const std::vector<Case> cases = {
      {"[N, C] mean", {8, 11}, {0, 3, 10, 5, 5, 1, 9, 2}},
      {"[N, C] sum, weighted", {8, 11}, {0, 3, 10, 5, 5, 1, 9, 2}, ts::Reduction::sum, true},
      {"[N, C] none, ignore_index", {8, 11}, {3, 3, 10, 5, 3, 1, 9, 2}, ts::Reduction::none, false, 3},
      {"[N, C, d1, d2] mean, weighted, ignore_index", {2, 5, 3, 2}, {0, 4, 1, 1, 2, 3, 4, 4, 0, 2, 1, 3},
       ts::Reduction::mean, true, 1},
      {"[C]", {9}, {4}},
      {"every target ignored (mean: 0 / 0)", {3, 4}, {2, 2, 2}, ts::Reduction::mean, false, 2},
      {"[300, 1000] mean (threaded)", {300, 1000}, many},
  };
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const Case& c : cases) {
      CAPTURE(ts::dtype_name(dtype));
      CAPTURE(c.name);
      const Tensor scores = (ts::randn(c.shape, gen, {.dtype = dtype}) * 3.0).detach();
      const Tensor target = ts::tensor<int64_t>(c.targets, target_shape(c.shape));
      const int64_t classes = c.shape.size() == 1 ? c.shape[0] : c.shape[1];
      Tensor weight;
      if (c.weighted) weight = (ts::rand({classes}, gen, {.dtype = dtype}) + 0.5).detach();
      // A gradient from upstream that is not 1 (per position for reduction none).
      const Tensor upstream = c.reduction == ts::Reduction::none
                                  ? ts::rand(target.sizes(), gen, {.dtype = dtype}).detach()
                                  : ts::full({}, 0.7, {.dtype = dtype});

      Tensor x = scores.clone().requires_grad_();
      Tensor loss = ts::cross_entropy(x, target, {.weight = weight, .reduction = c.reduction,
                                                  .ignore_index = c.ignore_index});
      CHECK(loss.grad_fn()->name() == "CrossEntropyBackward");
      loss.backward(upstream);

      Tensor y = scores.clone().requires_grad_();
      Tensor composed = ts::nll_loss(ts::log_softmax(y, c.shape.size() == 1 ? 0 : 1), target,
                                     {.weight = weight, .reduction = c.reduction, .ignore_index = c.ignore_index});
      composed.backward(upstream);

      CHECK(same_bits(loss, composed));
      CHECK(same_bits(x.grad(), y.grad()));
    }
  }
}

TEST_CASE("cross_entropy's backward holds one [N, C] buffer: the saved log-probabilities become the gradient") {
  constexpr int64_t rows = 64, classes = 4096;
  constexpr int64_t buffer = rows * classes * 4;  // one [N, C] float32 tensor: 1 MiB
  ts::Generator gen(7);
  const Tensor target = ts::randint(0, classes, {rows}, gen);
  // Peak bytes above the scores, from the forward through the backward, for `loss_of`.
  auto peak_above_scores = [&](auto loss_of) {
    Tensor x = ts::randn({rows, classes}, gen).requires_grad_();
    ts::reset_peak_memory();
    const int64_t scores = ts::memory_stats().current_bytes;
    loss_of(x).backward();
    const int64_t peak = ts::memory_stats().peak_bytes - scores;
    CHECK(ts::memory_stats().current_bytes - scores == buffer);  // what is left: x's gradient
    return peak;
  };
  const int64_t fused = peak_above_scores([&](const Tensor& x) { return ts::cross_entropy(x, target); });
  const int64_t composed =
      peak_above_scores([&](const Tensor& x) { return ts::nll_loss(ts::log_softmax(x, 1), target); });
  // The fused node: the log-probabilities, which become the gradient, and 16 bytes of 0-d
  // tensors (the loss, its total weight, ...). The composition: the saved log-probabilities,
  // nll_loss's dense gradient and log_softmax's, all at once.
  CHECK(fused == buffer + 16);
  CHECK(composed == 3 * buffer + 4);
}

TEST_CASE("cross_entropy's fused node under retain_graph keeps its log-probabilities for the next backward") {
  ts::Generator gen(9);
  Tensor x = ts::randn({6, 5}, gen).requires_grad_();
  const Tensor target = ts::tensor<int64_t>({0, 4, 2, 2, 1, 3});
  Tensor loss = ts::cross_entropy(x, target);
  loss.backward({}, /*retain_graph=*/true);
  const Tensor once = x.grad().clone();
  loss.backward({}, /*retain_graph=*/true);
  CHECK(same_bits(x.grad(), once + once));
  loss.backward();  // the last use may take the buffer
  CHECK(same_bits(x.grad(), once + once + once));
  CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("a second time"), ts::Error);
}
