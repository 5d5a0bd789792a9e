// The backward engine: accumulation, hooks, retain_graph, deep graphs, grad mode.
#include <doctest/doctest.h>

#include <cmath>
#include <tessera/tessera.h>

namespace ts = tessera;
using ts::DType;

TEST_CASE("gradients of a small expression") {
  ts::Tensor x = ts::tensor<double>({1, 2, 3}).requires_grad_();
  ts::Tensor y = (x * x * 3.0 + x).sum();  // dy/dx = 6x + 1
  y.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{7, 13, 19});
  CHECK(x.is_leaf());
  CHECK_FALSE(y.is_leaf());
  CHECK(y.grad_fn()->name() == "SumBackward");
}

TEST_CASE("gradients accumulate with +=") {
  ts::Tensor x = ts::tensor<double>({1, 2}).requires_grad_();
  (x * 2.0).sum().backward();
  (x * 3.0).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{5, 5});
  x.set_grad({});
  (x * x).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4});
}

TEST_CASE("backward from several outputs of one node reaches the leaves once") {
  // split's pieces are outputs of one node; a root list naming that node three times must
  // count its inputs' dependencies once (it once left the leaf waiting forever).
  ts::Tensor x = ts::arange(12, {.dtype = ts::DType::f64}).view({3, 4}).requires_grad_();
  std::vector<ts::Tensor> pieces = x.split(std::vector<int64_t>{1, 1, 2}, 1);
  ts::autograd::backward(pieces, {ts::full({3, 1}, 1.0, {.dtype = ts::DType::f64}),
                                  ts::full({3, 1}, 2.0, {.dtype = ts::DType::f64}),
                                  ts::full({3, 2}, 3.0, {.dtype = ts::DType::f64})});
  REQUIRE(x.grad().defined());
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 2, 3, 3, 1, 2, 3, 3, 1, 2, 3, 3});
  ts::Tensor y = ts::ones({2}, {.dtype = ts::DType::f64}).requires_grad_();
  ts::Tensor z = y * 2.0;
  ts::autograd::backward({z, z}, {ts::ones({2}, {.dtype = ts::DType::f64}), ts::ones({2}, {.dtype = ts::DType::f64})});
  CHECK(y.grad().to_vector<double>() == std::vector<double>{4, 4});
}

TEST_CASE("a second backward through a freed graph is a clear error") {
  ts::Tensor x = ts::tensor<double>({1, 2}).requires_grad_();
  ts::Tensor y = (x.exp()).sum();
  y.backward({}, true);  // retain_graph
  y.backward();
  CHECK(x.grad().to_vector<double>()[0] == doctest::Approx(2 * std::exp(1.0)));
  try {
    y.backward();
    FAIL("expected an error");
  } catch (const ts::Error& e) {
    CHECK(std::string(e.what()).find("second time") != std::string::npos);
  }
}

TEST_CASE("backward of a non-scalar needs a gradient") {
  ts::Tensor x = ts::tensor<double>({1, 2}).requires_grad_();
  ts::Tensor y = x * 2.0;
  CHECK_THROWS_AS(y.backward(), ts::ValueError);
  y.backward(ts::tensor<double>({1, 10}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 20});
}

TEST_CASE("a chain of 100,000 ops runs backward without deep recursion") {
  ts::Tensor x = ts::tensor<double>({1.0}).requires_grad_();
  ts::Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = y + 1.0;
  y.sum().backward();
  CHECK(x.grad().item<double>() == 1.0);
  // Destroying the graph must not recurse either.
  y = ts::Tensor();
}

TEST_CASE("NoGradGuard stops recording") {
  ts::Tensor x = ts::tensor<double>({1}).requires_grad_();
  {
    ts::NoGradGuard no_grad;
    ts::Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
    {
      ts::EnableGradGuard enable;
      CHECK((x * 2.0).requires_grad());
    }
    CHECK_FALSE((x * 2.0).requires_grad());
  }
  CHECK((x * 2.0).requires_grad());
  CHECK_FALSE(x.detach().requires_grad());
}

TEST_CASE("in-place ops on tensors that require grad are refused unless grad is off") {
  ts::Tensor x = ts::tensor<double>({1}).requires_grad_();
  CHECK_THROWS_AS(x.add_(ts::tensor<double>({1})), ts::ValueError);
  {
    ts::NoGradGuard no_grad;
    x.add_(ts::tensor<double>({1}));
  }
  CHECK(x.item<double>() == 2.0);
}

TEST_CASE("tensor hooks see and may replace gradients") {
  ts::Tensor x = ts::tensor<double>({1, 2}).requires_grad_();
  ts::Tensor h = x * 3.0;
  std::vector<double> seen;
  h.register_hook([&](const ts::Tensor& g) {
    seen = g.to_vector<double>();
    return g * 10.0;  // replace
  });
  int leaf_hook = x.register_hook([](const ts::Tensor& g) { return g + 1.0; });
  (h * h).sum().backward();
  CHECK(seen == std::vector<double>{6, 12});                         // d(h^2)/dh = 2h
  CHECK(x.grad().to_vector<double>() == std::vector<double>{181, 361});  // 3 * 10 * 2h + 1
  x.remove_hook(leaf_hook);
  x.set_grad({});
  (x * 1.0).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 1});
}

TEST_CASE("post-accumulate hooks run after each accumulation") {
  ts::Tensor w = ts::tensor<double>({1, 2}).requires_grad_();
  std::vector<std::vector<double>> after;
  w.register_post_accumulate_grad_hook([&](ts::Tensor& leaf) { after.push_back(leaf.grad().to_vector<double>()); });
  ts::Tensor y = (w * 2.0).sum() + (w * w).sum();
  y.backward();
  REQUIRE(after.size() == 1);  // both paths are summed before accumulation
  CHECK(after[0] == std::vector<double>{4, 6});
  (w * 1.0).sum().backward();
  REQUIRE(after.size() == 2);
  CHECK(after[1] == std::vector<double>{5, 7});
}

TEST_CASE("callbacks queued during backward run when it ends") {
  ts::Tensor w = ts::tensor<double>({1}).requires_grad_();
  std::vector<std::string> events;
  w.register_post_accumulate_grad_hook([&](ts::Tensor&) {
    events.push_back("accumulated");
    ts::autograd::queue_callback([&] { events.push_back("finished"); });
  });
  (w * 2.0).sum().backward();
  CHECK(events == std::vector<std::string>{"accumulated", "finished"});
  CHECK_FALSE(ts::autograd::in_backward());
  CHECK_THROWS_AS(ts::autograd::queue_callback([] {}), ts::Error);
}

TEST_CASE("backward runs in reverse creation order") {
  ts::Tensor x = ts::tensor<double>({1}).requires_grad_();
  std::vector<int> order;
  ts::Tensor a = x * 2.0;
  a.register_hook([&](const ts::Tensor&) { order.push_back(1); return ts::Tensor(); });
  ts::Tensor b = a * 3.0;
  b.register_hook([&](const ts::Tensor&) { order.push_back(2); return ts::Tensor(); });
  ts::Tensor c = b * 4.0;
  c.register_hook([&](const ts::Tensor&) { order.push_back(3); return ts::Tensor(); });
  c.sum().backward();
  CHECK(order == std::vector<int>{3, 2, 1});
  CHECK(x.grad().item<double>() == 24.0);
}

TEST_CASE("only floating tensors require grad") {
  CHECK_THROWS_AS(ts::arange(3).requires_grad_(), ts::DTypeError);
}

TEST_CASE("ReLU's backward writes in place only into gradients nothing else holds") {
  ts::Generator gen(3);
  ts::Tensor x = (ts::rand({4, 5}, gen) - 0.5).detach().requires_grad_();
  // The caller keeps the gradient it passes: it must come back unchanged.
  ts::Tensor upstream = ts::ones({4, 5});
  ts::relu(x).backward(upstream);
  CHECK(upstream.to_vector<float>() == std::vector<float>(20, 1.0f));
  std::vector<float> expected;
  for (float v : x.detach().to_vector<float>()) expected.push_back(v > 0 ? 1.0f : 0.0f);
  CHECK(x.grad().to_vector<float>() == expected);
  // Inside a graph the engine owns the incoming gradient (2 * 1 from the mul's backward),
  // and the in-place path must give the same values.
  x.set_grad(ts::Tensor());
  (ts::relu(x * 2.0)).sum().backward();
  for (float& v : expected) v *= 2.0f;
  CHECK(x.grad().to_vector<float>() == expected);
}

TEST_CASE("gradients reaching a node along two paths are summed in place") {
  // u feeds two products: its node receives 3 g and 5 g. Summed into the first (a buffer
  // only the engine holds), not into a third [N] buffer, as PyTorch's InputBuffer does: a
  // tied weight (GPT-2's embedding and head) then needs one gradient buffer less.
  constexpr int64_t n = 1 << 20;
  constexpr int64_t bytes = n * 4;
  ts::Tensor x = ts::ones({n}).requires_grad_();
  ts::Tensor u = x * 2.0;
  ts::Tensor loss = (u * 3.0).sum() + (u * 5.0).sum();
  u = ts::Tensor();
  ts::reset_peak_memory();
  const int64_t before = ts::memory_stats().current_bytes;
  loss.backward();
  const int64_t peak = ts::memory_stats().peak_bytes - before;
  CHECK(x.grad().to_vector<float>() == std::vector<float>(n, 16.0f));
  // The two contributions, then their sum and x's gradient (out of place: 3 x [N] at the sum).
  CHECK(peak <= 2 * bytes + 64);
}

TEST_CASE("a gradient sink takes each of a leaf's gradients as it arrives; post-accumulate hooks run once") {
  // w feeds two products, as GPT-2's tied wte feeds the head and the embedding: the sink
  // sees 3 g and then 5 g (reverse forward order), the engine never holds both.
  ts::Tensor w = ts::ones({4}).requires_grad_();
  std::vector<std::vector<float>> taken;
  ts::autograd::set_gradient_sink(w, [&](const ts::Tensor& grad) {
    taken.push_back(grad.to_vector<float>());
    return true;
  });
  int post_hooks = 0;
  bool grad_defined_in_hook = true;
  w.register_post_accumulate_grad_hook([&](ts::Tensor& leaf) {
    ++post_hooks;
    grad_defined_in_hook = leaf.grad().defined();
  });
  ts::Tensor first_use = (w * 3.0).sum();
  ts::Tensor second_use = (w * 5.0).sum();
  (first_use + second_use).backward();
  REQUIRE(taken.size() == 2);
  CHECK(taken[0] == std::vector<float>(4, 5.0f));  // the later use's first
  CHECK(taken[1] == std::vector<float>(4, 3.0f));
  CHECK(post_hooks == 1);
  CHECK_FALSE(grad_defined_in_hook);
  CHECK_FALSE(w.grad().defined());
}

TEST_CASE("gradients a sink declines are summed and accumulated as without one") {
  ts::Tensor w = ts::ones({3}).requires_grad_();
  int offered = 0;
  ts::autograd::set_gradient_sink(w, [&](const ts::Tensor&) {
    ++offered;
    return false;
  });
  ((w * 3.0).sum() + (w * 5.0).sum()).backward();
  CHECK(offered == 2);
  CHECK(w.grad().to_vector<float>() == std::vector<float>(3, 8.0f));
}

TEST_CASE("a leaf with a gradient hook gets nothing through its sink: the hook sees the sum") {
  ts::Tensor w = ts::ones({3}).requires_grad_();
  int offered = 0;
  ts::autograd::set_gradient_sink(w, [&](const ts::Tensor&) { return ++offered > 0; });
  std::vector<float> seen;
  w.register_hook([&](const ts::Tensor& grad) {
    seen = grad.to_vector<float>();
    return ts::Tensor();
  });
  ((w * 3.0).sum() + (w * 5.0).sum()).backward();
  CHECK(offered == 0);
  CHECK(seen == std::vector<float>(3, 8.0f));
  CHECK(w.grad().to_vector<float>() == std::vector<float>(3, 8.0f));
  CHECK_THROWS_AS(ts::autograd::set_gradient_sink(w * 2.0, [](const ts::Tensor&) { return true; }), ts::ValueError);
}
