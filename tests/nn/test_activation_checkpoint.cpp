// Activation checkpointing (nn::checkpoint, nn::apply_activation_checkpointing): bit-identical
// outputs, losses and gradients with it on or off (dropout and BatchNorm included), the
// activations really dropped (the allocator's peak), the f64 gradient check through a
// checkpoint, and the misuses it refuses. FSDP's checkpointed units: tests/fsdp/test_checkpointing.cpp.
#include <doctest/doctest.h>

#include <cstring>
#include <tessera/tessera.h>

namespace ts = tessera;
namespace nn = tessera::nn;
using ts::DType;
using ts::Tensor;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  Tensor ca = a.detach().contiguous(), cb = b.detach().contiguous();
  return ca.numel() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

constexpr int64_t kWidth = 16;

// A pre-norm residual block with dropout in two places (as GPT-2's).
struct Block : nn::Module {
  nn::LayerNorm ln{kWidth};
  nn::Linear fc{kWidth, 4 * kWidth};
  nn::GELU gelu{"tanh"};
  nn::Dropout inner{0.2};
  nn::Linear proj{4 * kWidth, kWidth};
  nn::Dropout residual{0.1};
  Block() {
    register_modules({{"ln", ln}, {"fc", fc}, {"gelu", gelu}, {"inner", inner}, {"proj", proj}, {"residual", residual}});
  }
  Tensor forward(Tensor x) override { return x + residual(proj(inner(gelu(fc(ln(x)))))); }
  std::string type_name() const override { return "Block"; }
};

struct Net : nn::Module {
  nn::Linear embed{8, kWidth};
  nn::ModuleList blocks;
  nn::Linear head{kWidth, 4};
  explicit Net(int depth, DType dtype = DType::f32) {
    for (int i = 0; i < depth; ++i) blocks.emplace<Block>();
    register_modules({{"embed", embed}, {"blocks", blocks}, {"head", head}});
    to(dtype);
    reset_parameters(7);
  }
  Tensor forward(Tensor x) override {
    x = embed(x);
    for (nn::Module& block : blocks) x = block(x);
    return head(x);
  }
};

Tensor input_batch(int64_t rows, DType dtype = DType::f32) {
  ts::Generator gen(3);
  return ts::randn({rows, 8}, gen, {.dtype = dtype});
}

// Two SGD steps inside BatchScopes (dropout keyed by step and row); returns the losses.
std::vector<Tensor> train(Net& net, const Tensor& x) {
  ts::optim::SGD optimizer(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  std::vector<Tensor> losses;
  for (uint64_t step = 0; step < 2; ++step) {
    nn::BatchScope scope({.seed = 11, .step = step});
    optimizer.zero_grad();
    Tensor loss = (net(x) * net(x)).mean();  // two calls: each checkpointed call keeps its own keys
    loss.backward();
    optimizer.step();
    losses.push_back(loss.detach());
  }
  return losses;
}

}  // namespace

TEST_CASE("checkpoint(function, x): the same output and gradients, bit for bit, dropout included") {
  Block plain, checkpointed;
  plain.reset_parameters(1);
  checkpointed.reset_parameters(1);
  ts::Generator gen(2);
  Tensor x = ts::randn({32, kWidth}, gen);
  Tensor x_plain = x.clone().requires_grad_(), x_checkpointed = x.clone().requires_grad_();
  // Outside a BatchScope dropout draws from the default generator (as torch's): the same
  // seed before each run gives both the same masks.
  ts::manual_seed(5);
  Tensor y_plain = plain(x_plain * 2.0);
  ts::manual_seed(5);
  Tensor y_checkpointed = nn::checkpoint([&](Tensor t) { return checkpointed(t); }, x_checkpointed * 2.0);
  ts::manual_seed(0);
  CHECK(y_checkpointed.grad_fn()->name() == "CheckpointBackward");
  CHECK(same_bits(y_plain, y_checkpointed));
  (y_plain * y_plain).sum().backward();
  (y_checkpointed * y_checkpointed).sum().backward();
  CHECK(same_bits(x_plain.grad(), x_checkpointed.grad()));
  auto a = plain.named_parameters(), b = checkpointed.named_parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].first);
    CHECK(same_bits(a[i].second.grad(), b[i].second.grad()));
  }
}

TEST_CASE("the recomputation replays the first forward's dropout masks, whatever scope backward runs in") {
  Block plain, checkpointed;
  plain.reset_parameters(4);
  checkpointed.reset_parameters(4);
  ts::Generator gen(5);
  Tensor x = ts::randn({8, kWidth}, gen);
  Tensor x_plain = x.clone().requires_grad_(), x_checkpointed = x.clone().requires_grad_();
  Tensor y_plain, y_checkpointed;
  {
    nn::BatchScope scope({.seed = 3, .step = 9, .first_row = 40});
    y_plain = plain(x_plain);
    y_checkpointed = nn::checkpoint(checkpointed, x_checkpointed);
  }
  // Backward in a later step's scope: the keys are the recorded ones.
  nn::BatchScope later({.seed = 3, .step = 10});
  y_plain.sum().backward();
  y_checkpointed.sum().backward();
  CHECK(same_bits(y_plain, y_checkpointed));
  CHECK(same_bits(x_plain.grad(), x_checkpointed.grad()));
}

TEST_CASE("apply_activation_checkpointing: every Block, bit-identical training, and fewer bytes held") {
  Net plain(4), checkpointed(4);
  CHECK(nn::apply_activation_checkpointing(checkpointed, [](nn::Module& m) { return m.type_name() == "Block"; }) == 4);
  // A module inside a checkpointed one is covered already: nothing more is wrapped.
  CHECK(nn::apply_activation_checkpointing(checkpointed, [](nn::Module& m) { return m.type_name() == "Linear" &&
                                                                                    m.path().rfind("blocks", 0) == 0; }) == 0);
  CHECK_THROWS_WITH_AS(
      nn::apply_activation_checkpointing(checkpointed, [](nn::Module& m) { return m.type_name() == "Block"; }),
      doctest::Contains("Block 'blocks.0' already has a call wrapper"), ts::ValueError);
  Tensor x = input_batch(64);
  std::vector<Tensor> losses_plain = train(plain, x), losses_checkpointed = train(checkpointed, x);
  for (size_t i = 0; i < losses_plain.size(); ++i) CHECK(same_bits(losses_plain[i], losses_checkpointed[i]));
  auto a = plain.named_parameters(), b = checkpointed.named_parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].first);
    CHECK(same_bits(a[i].second, b[i].second));
    CHECK(same_bits(a[i].second.grad(), b[i].second.grad()));
  }

  // What a forward keeps for backward: each block's activations (about 20 row x width
  // floats) without checkpointing; with it, one input per block, plus one block's worth
  // while it is recomputed. Measured as the allocator's peak above what existed before.
  auto activation_peak = [&](Net& net) {
    Tensor big = input_batch(4096);
    ts::reset_peak_memory();
    const int64_t before = ts::memory_stats().current_bytes;
    Tensor loss = net(big).sum();
    loss.backward();
    return ts::memory_stats().peak_bytes - before;
  };
  const int64_t peak_plain = activation_peak(plain), peak_checkpointed = activation_peak(checkpointed);
  MESSAGE("activation peak, 4 blocks of 4096 x 16: " << peak_plain << " bytes plain, " << peak_checkpointed
                                                     << " checkpointed");
  CHECK(peak_checkpointed * 2 < peak_plain);
}

TEST_CASE("BatchNorm2d in a checkpointed call updates its running statistics once and normalises alike") {
  nn::BatchNorm2d plain(3), checkpointed(3);
  ts::Generator gen(8);
  Tensor x = ts::randn({4, 3, 5, 5}, gen).requires_grad_();
  Tensor y_plain = plain(x);
  Tensor y_checkpointed = nn::checkpoint(checkpointed, x);
  y_plain.sum().backward();
  Tensor g_plain = x.grad().clone();
  x.set_grad(Tensor());
  y_checkpointed.sum().backward();
  CHECK(same_bits(y_plain, y_checkpointed));
  CHECK(same_bits(g_plain, x.grad()));
  CHECK(same_bits(plain.running_mean, checkpointed.running_mean));
  CHECK(same_bits(plain.running_var, checkpointed.running_var));
  CHECK(checkpointed.num_batches_tracked.item<int64_t>() == 1);
}

TEST_CASE("gradcheck through a checkpointed block (float64)") {
  Block block;
  block.to(DType::f64);
  block.reset_parameters(6);
  block.eval();  // dropout off: the numerical differences need one function
  ts::Generator gen(9);
  Tensor x = ts::randn({3, kWidth}, gen, {.dtype = DType::f64}).requires_grad_();
  Tensor w = block.fc.weight;
  auto result = ts::autograd::gradcheck(
      [&](const ts::autograd::TensorList& in) { return nn::checkpoint([&](Tensor t) { return block(t); }, in[0]); },
      {x});
  CHECK_MESSAGE(result.ok, result.message);
  // The parameters' gradients accumulate as without checkpointing.
  block.zero_grad();
  Tensor y = nn::checkpoint(block, x);
  (y * y).sum().backward();
  Tensor through_checkpoint = w.grad().clone();
  w.set_grad(Tensor());
  Tensor z = block(x);
  (z * z).sum().backward();
  CHECK(same_bits(through_checkpoint, w.grad()));
}

TEST_CASE("an input that needs no gradient: the parameters inside still get theirs") {
  Block plain, checkpointed;
  plain.reset_parameters(12);
  checkpointed.reset_parameters(12);
  plain.eval();
  checkpointed.eval();
  ts::Generator gen(13);
  Tensor x = ts::randn({4, kWidth}, gen);  // data: no gradient wanted
  plain(x).sum().backward();
  Tensor y = nn::checkpoint(checkpointed, x);
  CHECK(y.requires_grad());
  y.sum().backward();
  REQUIRE(checkpointed.fc.weight.grad().defined());
  CHECK(same_bits(plain.fc.weight.grad(), checkpointed.fc.weight.grad()));
  CHECK(same_bits(plain.ln.weight.grad(), checkpointed.ln.weight.grad()));
}

TEST_CASE("checkpoint refuses a function that reads a tensor of the outer graph, and runs plainly without grad") {
  Block block;
  ts::Generator gen(10);
  Tensor outer = ts::randn({2, kWidth}, gen).requires_grad_() * 3.0;  // made by MulBackward, outside
  Tensor x = ts::randn({2, kWidth}, gen).requires_grad_();
  Tensor y = nn::checkpoint([&](Tensor t) { return block(t) + outer; }, x);
  CHECK_THROWS_WITH_AS(y.sum().backward(), doctest::Contains("uses a tensor computed outside it that needs a gradient"),
                       ts::ValueError);
  {
    ts::NoGradGuard no_grad;
    Tensor plain = nn::checkpoint(block, x);
    CHECK(!plain.requires_grad());
  }
  CHECK_THROWS_WITH_AS(nn::checkpoint(nn::CheckpointFunction(), x), doctest::Contains("no function given"),
                       ts::ValueError);
}
