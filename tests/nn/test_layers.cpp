// Layers: shapes, defaults and behaviour as in PyTorch.
#include <doctest/doctest.h>

#include <tessera/tessera.h>

#include <cmath>
#include <limits>

namespace ts = tessera;
namespace nn = tessera::nn;
using ts::DType;
using ts::Shape;

TEST_CASE("Linear computes x W^T + b") {
  nn::Linear fc(3, 2);
  ts::NoGradGuard no_grad;
  fc.weight.copy_(ts::tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  fc.bias.copy_(ts::tensor<float>({0.5, -0.5}));
  ts::Tensor y = fc(ts::tensor<float>({1, 1, 1, 0, 1, 0}, {2, 3}));
  CHECK(y.to_vector<float>() == std::vector<float>{6.5f, 14.5f, 2.5f, 4.5f});
}

TEST_CASE("Conv2d shapes and default initialisation bounds") {
  nn::Conv2d conv(1, 32, 3);
  ts::Generator gen(0);
  ts::Tensor y = conv(ts::randn({2, 1, 28, 28}, gen));
  CHECK(y.sizes() == Shape{2, 32, 26, 26});
  double bound = 1.0 / 3.0;  // 1 / sqrt(1 * 3 * 3)
  CHECK(conv.weight.abs().max().item<float>() <= bound);
  CHECK(conv.weight.abs().max().item<float>() > 0.9 * bound);
  CHECK(conv.bias.abs().max().item<float>() <= bound);
  nn::Conv2d strided(3, 4, {3, 2}, {.stride = 2, .padding = {1, 0}, .bias = false});
  CHECK_FALSE(strided.bias.defined());
  CHECK(strided(ts::zeros({1, 3, 9, 9})).sizes() == Shape{1, 4, 5, 4});
}

TEST_CASE("Dropout is keyed by module, step and global row") {
  struct TwoDropouts : nn::Module {
    nn::Dropout a{0.5}, b{0.5};
    TwoDropouts() { register_modules({{"a", a}, {"b", b}}); }
  } m;
  ts::Tensor x = ts::ones({6, 40});
  ts::Tensor ya, yb, tail;
  {
    nn::BatchScope scope({.seed = 1, .step = 7, .first_row = 0});
    ya = m.a(x);
    yb = m.b(x);
  }
  CHECK(ya.to_vector<float>() != yb.to_vector<float>());  // layers draw from their own streams
  {
    nn::BatchScope scope({.seed = 1, .step = 7, .first_row = 4});
    tail = m.a(x.narrow(0, 4, 2));
  }
  CHECK(tail.to_vector<float>() == ya.narrow(0, 4, 2).contiguous().to_vector<float>());
  m.eval();
  CHECK(m.a(x).to_vector<float>() == x.to_vector<float>());
}

TEST_CASE("Dropout outside a BatchScope is keyed by the default generator") {
  nn::Dropout dropout(0.5);
  ts::Tensor x = ts::ones({4, 50});
  ts::manual_seed(3);
  std::vector<float> first = dropout(x).to_vector<float>(), second = dropout(x).to_vector<float>();
  CHECK(first != second);  // each call takes the next step of the generator's sequence
  ts::manual_seed(3);
  CHECK(dropout(x).to_vector<float>() == first);  // the same seed, the same masks
  CHECK(dropout(x).to_vector<float>() == second);
  ts::manual_seed(4);
  CHECK(dropout(x).to_vector<float>() != first);  // another seed, another mask (was seed 0 always)
  ts::manual_seed(0);
}

TEST_CASE("ts::dropout without a key draws one from the default generator, as F.dropout") {
  ts::Tensor x = ts::ones({4, 50});
  ts::manual_seed(3);
  const ts::Tensor first = ts::dropout(x, 0.5, true), second = ts::dropout(x);  // PyTorch's defaults
  CHECK_FALSE(ts::equal(first, second));
  // The generator's seed and next step, as next_dropout_key() and nn::Dropout's stream-0 key.
  ts::manual_seed(3);
  CHECK(ts::equal(ts::dropout(x, 0.5, true, ts::next_dropout_key()), first));
  CHECK(ts::equal(ts::dropout(x, 0.5, true), second));
  // Outside training (or at p = 0) it is the identity and draws nothing.
  ts::manual_seed(3);
  CHECK(ts::equal(ts::dropout(x, 0.5, false), x));
  CHECK(ts::equal(ts::dropout(x, 0.0, true), x));
  CHECK(ts::equal(ts::dropout(x), first));
  // An explicit key is a pure function of the key: the same mask whatever the generator.
  const ts::DropoutKey key{.seed = 7, .step = 2};
  CHECK(ts::equal(ts::dropout(x, 0.5, true, key), ts::dropout(x, 0.5, true, key)));
  ts::manual_seed(0);
}

TEST_CASE("MaxPool2d, Flatten, LogSoftmax, ReLU") {
  ts::Tensor x = ts::arange(16, {.dtype = DType::f32}).view({1, 1, 4, 4});
  nn::MaxPool2d pool(2);
  CHECK(pool(x).to_vector<float>() == std::vector<float>{5, 7, 13, 15});
  nn::Flatten flatten;
  CHECK(flatten(x).sizes() == Shape{1, 16});
  nn::LogSoftmax log_softmax(1);
  ts::Tensor p = log_softmax(ts::zeros({2, 4})).exp();
  CHECK(p.sum().item<float>() == doctest::Approx(2.0));
  nn::ReLU relu;
  CHECK(relu(ts::tensor<float>({-1, 2})).to_vector<float>() == std::vector<float>{0, 2});
}

TEST_CASE("Sequential names its modules 0, 1, ... and runs them in order") {
  nn::Sequential mlp;
  mlp.emplace<nn::Linear>(4, 8);
  mlp.emplace<nn::ReLU>();
  mlp.emplace<nn::Linear>(8, 2);
  CHECK(mlp.size() == 3);
  std::vector<std::string> names;
  for (auto& [name, t] : mlp.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  CHECK(mlp(ts::ones({5, 4})).sizes() == Shape{5, 2});
}

TEST_CASE("Sequential is a ModuleList that runs: built from a list, indexed from the end, typed access") {
  auto first = std::make_shared<nn::Linear>(4, 3);
  nn::Sequential net{first, std::make_shared<nn::ReLU>()};
  net.extend({std::make_shared<nn::Linear>(3, 2)});
  CHECK(net.size() == 3);
  CHECK(&net[0] == first.get());
  CHECK(net.at<nn::Linear>(-1).weight.sizes() == Shape{2, 3});
  CHECK(net.ptr(1)->type_name() == "ReLU");
  CHECK(!net.is_container());  // called, so FSDP may make it a unit, unlike a ModuleList
  CHECK_THROWS_WITH_AS(net.at<nn::Linear>(1), "Sequential entry '1' is a ReLU, not a Linear", ts::ValueError);
  CHECK_THROWS_WITH_AS(net.append(nullptr), "Sequential: cannot append a null module", ts::ValueError);
  CHECK_THROWS_AS(net[3], ts::IndexError);
  ts::Tensor x = ts::ones({5, 4});
  CHECK(ts::equal(net(x), net[2](net[1](net[0](x)))));
}

// PyTorch 1.13's values on the same inputs (checked by hand): relu keeps NaN and -0, its
// gradient passes through NaN; max-pool and max pick NaN (its first index) and route the
// gradient there. A NaN that vanished in relu would spread through the weights unseen.
TEST_CASE("NaN propagates through relu, max-pool and max as in PyTorch, so a NaN weight shows in the loss") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto same = [](const std::vector<float>& got, const std::vector<float>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CHECK_MESSAGE((std::isnan(want[i]) ? std::isnan(got[i]) : (got[i] == want[i] && std::signbit(got[i]) == std::signbit(want[i]))),
                    i, ": ", got[i], " vs ", want[i]);
    }
  };
  for (DType dtype : {DType::f32, DType::f64}) {
    CAPTURE(ts::dtype_name(dtype));
    ts::Tensor x = ts::tensor<float>({nan, -0.0f, -1.0f, 2.0f}).to(dtype).requires_grad_();
    ts::Tensor y = ts::relu(x);
    same(y.to(DType::f32).to_vector<float>(), {nan, -0.0f, 0.0f, 2.0f});
    y.backward(ts::ones({4}, {.dtype = dtype}));
    same(x.grad().to(DType::f32).to_vector<float>(), {1, 0, 0, 1});

    ts::Tensor image = ts::tensor<float>({nan, 1, 2, 3}, {1, 1, 2, 2}).to(dtype).requires_grad_();
    ts::Tensor pooled = ts::max_pool2d(image, 2);
    same(pooled.to(DType::f32).to_vector<float>(), {nan});
    pooled.sum().backward();
    same(image.grad().to(DType::f32).to_vector<float>(), {1, 0, 0, 0});

    ts::Tensor row = ts::tensor<float>({1, nan, 3}).to(dtype);
    same(row.max().to(DType::f32).to_vector<float>(), {nan});
    CHECK(row.argmax().item<int64_t>() == 1);
    same(ts::maximum(ts::tensor<float>({nan, 1}).to(dtype), ts::tensor<float>({0, nan}).to(dtype)).to(DType::f32).to_vector<float>(),
         {nan, nan});
  }
  // One NaN weight: the loss is NaN, not a finite number over silently zeroed activations.
  nn::Sequential net;
  nn::Linear& first = net.emplace<nn::Linear>(4, 8);
  net.emplace<nn::ReLU>();
  net.emplace<nn::Linear>(8, 3);
  {
    ts::NoGradGuard no_grad;
    first.weight.fill_(-0.5);  // every activation of the first layer is negative: relu zeroes them
    ts::Tensor one = first.weight.narrow(0, 0, 1).narrow(1, 0, 1);
    one.fill_(nan);
  }
  ts::Tensor loss = ts::nll_loss(ts::log_softmax(net(ts::ones({2, 4})), 1), ts::zeros({2}, {.dtype = DType::i64}));
  CHECK(std::isnan(loss.item<float>()));
}
