// Module: registration by reference, names, traversal, deferred initialisation keyed by
// name, state dicts, conversion, hooks.
#include <doctest/doctest.h>

#include <functional>
#include <sstream>
#include <vector>
#include <tessera/tessera.h>

namespace ts = tessera;
namespace nn = tessera::nn;
using ts::DType;
using ts::Shape;

namespace {

struct Block : nn::Module {
  nn::Linear fc{4, 3};
  nn::ReLU act;
  ts::Tensor scale = ts::ones({3});
  ts::Tensor running = ts::zeros({3});
  Block() {
    register_modules({{"fc", fc}, {"act", act}});
    register_parameter("scale", scale);
    register_buffer("running", running);
  }
  ts::Tensor forward(ts::Tensor x) override { return act(fc(x)) * scale; }
};

struct Net : nn::Module {
  Block block;
  nn::Linear head{3, 2, {.bias = false}};
  Net() { register_modules({{"block", block}, {"head", head}}); }
  ts::Tensor forward(ts::Tensor x) override { return head(block(x)); }
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, ts::Tensor>>& entries) {
  std::vector<std::string> names;
  for (const auto& [name, t] : entries) names.push_back(name);
  return names;
}

}  // namespace

TEST_CASE("named parameters, buffers and modules follow registration order") {
  Net net;
  CHECK(names_of(net.named_parameters()) ==
        std::vector<std::string>{"block.scale", "block.fc.weight", "block.fc.bias", "head.weight"});
  CHECK(names_of(net.named_buffers()) == std::vector<std::string>{"block.running"});
  CHECK(net.parameters().size() == 4);
  CHECK(net.parameters(false).empty());
  std::vector<std::string> module_names;
  for (auto& [name, m] : net.named_modules()) module_names.push_back(name);
  CHECK(module_names == std::vector<std::string>{"", "block", "block.fc", "block.act", "head"});
  CHECK(net.block.fc.path() == "block.fc");
  CHECK(net.state_dict().keys() ==
        std::vector<std::string>{"block.scale", "block.running", "block.fc.weight", "block.fc.bias", "head.weight"});
}

TEST_CASE("reassigning a member keeps the registry pointing at it") {
  Net net;
  net.head.weight = ts::full({2, 3}, 7.0).requires_grad_();
  auto params = net.named_parameters();
  CHECK(params.back().first == "head.weight");
  CHECK(params.back().second.is_same(net.head.weight));
  CHECK(net.state_dict().at("head.weight").at<float>({1, 2}) == 7.0f);
}

TEST_CASE("registration errors name the module and the key") {
  Block block;
  ts::Tensor extra;
  CHECK_THROWS_WITH_AS(block.register_parameter("scale", extra), doctest::Contains("already registered"),
                       ts::ValueError);
  CHECK_THROWS_AS(block.register_parameter("a.b", extra), ts::ValueError);
}

TEST_CASE("parameters are deferred and keyed by their full name") {
  int64_t before = ts::memory_stats().current_bytes;
  Net a;
  CHECK(a.block.fc.weight.storage()->is_deferred());
  CHECK(ts::memory_stats().current_bytes - before < 64);  // only the eager scale/running buffers
  // The same values whenever the model is built; different layers differ.
  Net b;
  CHECK(a.block.fc.weight.to_vector<float>() == b.block.fc.weight.to_vector<float>());
  CHECK(a.block.fc.bias.to_vector<float>() != a.head.weight.to_vector<float>());
  // The values are exactly the rule's fill for the full dotted name.
  std::vector<float> expected(12);
  nn::init::kaiming_uniform(4).fill(expected.data(), DType::f32, 12, 0, "block.fc.weight", 0);
  CHECK(a.block.fc.weight.to_vector<float>() == expected);
  // PyTorch's bound: kaiming_uniform(a=sqrt(5)) on fan_in 4 is U(-1/2, 1/2).
  for (float v : a.block.fc.weight.to_vector<float>()) CHECK(std::abs(v) <= 0.5f);
  // Another seed gives other values.
  Net c;
  c.reset_parameters(1);
  CHECK(c.block.fc.weight.to_vector<float>() != expected);
  CHECK_THROWS_AS(c.reset_parameters(2), ts::ValueError);  // already materialised
}

TEST_CASE("state_dict round trip and strict loading errors") {
  Net a, b;
  b.reset_parameters(5);
  b.load_state_dict(a.state_dict());
  for (auto& [name, t] : a.state_dict()) CHECK(b.state_dict().at(name).to_vector<float>() == t.to_vector<float>());
  // Loading keeps the identity of the parameters (optimizers hold them).
  ts::Tensor held = b.head.weight;
  b.load_state_dict(a.state_dict());
  CHECK(held.is_same(b.head.weight));

  ts::StateDict broken = a.state_dict();
  broken.erase("head.weight");
  broken.insert("head.extra", ts::zeros({1}));
  broken.insert("block.scale", ts::zeros({4}));
  try {
    b.load_state_dict(broken);
    FAIL("expected an error");
  } catch (const ts::ValueError& e) {
    std::string message = e.what();
    CHECK(message.find("missing keys:\n    head.weight") != std::string::npos);
    CHECK(message.find("unexpected keys:\n    head.extra") != std::string::npos);
    CHECK(message.find("block.scale: checkpoint [4], model [3]") != std::string::npos);
  }
  // Non-strict loading skips missing and unexpected keys but not shape mismatches.
  broken.insert("block.scale", ts::full({3}, 2.0));
  b.load_state_dict(broken, false);
  CHECK(b.block.scale.at<float>({0}) == 2.0f);
}

TEST_CASE("to(dtype) converts in place and keeps deferred parameters deferred") {
  Net net;
  ts::Tensor held = net.head.weight;
  net.to(DType::f64);
  CHECK(net.head.weight.dtype() == DType::f64);
  CHECK(held.dtype() == DType::f64);  // same tensor
  CHECK(net.head.weight.storage()->is_deferred());
  CHECK(net.block.scale.dtype() == DType::f64);
  CHECK(net.block.running.dtype() == DType::f64);
  CHECK(net.head.weight.requires_grad());
  ts::Tensor y = net(ts::ones({2, 4}, {.dtype = DType::f64}));
  CHECK(y.dtype() == DType::f64);
  CHECK(y.sizes() == Shape{2, 2});
}

TEST_CASE("train, eval, zero_grad and apply") {
  Net net;
  net.eval();
  CHECK_FALSE(net.block.act.is_training());
  net.train();
  CHECK(net.block.fc.is_training());
  net(ts::ones({1, 4})).sum().backward();
  CHECK(net.head.weight.grad().defined());
  net.zero_grad(false);
  CHECK(net.head.weight.grad().abs().sum().item<float>() == 0.0f);
  net.zero_grad();
  CHECK_FALSE(net.head.weight.grad().defined());
  std::vector<std::string> order;
  net.apply([&](nn::Module& m) { order.push_back(m.type_name()); });
  CHECK(order == std::vector<std::string>{"Linear", "ReLU", "Block", "Linear", "Net"});
}

TEST_CASE("forward hooks run around forward and can be removed") {
  nn::Linear fc(2, 2);
  std::vector<std::string> events;
  int pre = fc.register_forward_pre_hook([&](nn::Module&, ts::Tensor& input) {
    events.push_back("pre");
    input = input * 2.0;
  });
  fc.register_forward_hook([&](nn::Module&, ts::Tensor& output) {
    events.push_back("post");
    output = output * 0.0;
  });
  ts::Tensor y = fc(ts::ones({1, 2}));
  CHECK(events == std::vector<std::string>{"pre", "post"});
  CHECK(y.abs().sum().item<float>() == 0.0f);
  fc.remove_hook(pre);
  fc(ts::ones({1, 2}));
  CHECK(events.size() == 3);
}

// The expected strings are what torch 1.13 prints for the same modules.
TEST_CASE("printing: a module's own class name, torch's pooling arguments, extra lines before children") {
  struct Head : nn::Module {
    nn::MaxPool2d pool{3, {.stride = 2, .padding = 1}};
    nn::MaxPool2d pair{{3, 2}};
    nn::AdaptiveAvgPool2d global{1}, grid{{1, 2}};
    nn::Sequential body;
    Head() {
      body.emplace<nn::ReLU>();
      body.emplace<nn::Linear>(2, 3);
      register_modules({{"pool", pool}, {"pair", pair}, {"global", global}, {"grid", grid}, {"body", body}});
    }
    std::string extra_repr() const override { return "hello=1\nworld=2"; }
  };
  struct Leaf : nn::Module {
    std::string extra_repr() const override { return "size=4"; }
  };
  Head head;
  CHECK(nn::repr(head) ==
        "Head(\n"
        "  hello=1\n"
        "  world=2\n"
        "  (pool): MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=False)\n"
        "  (pair): MaxPool2d(kernel_size=(3, 2), stride=(3, 2), padding=0, dilation=1, ceil_mode=False)\n"
        "  (global): AdaptiveAvgPool2d(output_size=1)\n"
        "  (grid): AdaptiveAvgPool2d(output_size=(1, 2))\n"
        "  (body): Sequential(\n"
        "    (0): ReLU()\n"
        "    (1): Linear(in_features=2, out_features=3, bias=True)\n"
        "  )\n"
        ")");
  CHECK(nn::repr(Leaf()) == "Leaf(size=4)");
  CHECK(head.type_name() == "Head");
  CHECK(nn::Conv2d(1, 2, 3).type_name() == "Conv2d");
  std::ostringstream conv;
  conv << nn::Conv2d(1, 2, 3);
  CHECK(conv.str() == "Conv2d(1, 2, kernel_size=(3, 3), stride=(1, 1))");
}

TEST_CASE("printing looks like PyTorch's") {
  Net net;
  std::ostringstream out;
  out << net;
  CHECK(out.str() ==
        "Net(\n"
        "  (block): Block(\n"
        "    (fc): Linear(in_features=4, out_features=3, bias=True)\n"
        "    (act): ReLU()\n"
        "  )\n"
        "  (head): Linear(in_features=3, out_features=2, bias=False)\n"
        ")");
}

TEST_CASE("ModuleHolder: called like the module, shared by copies and containers; an empty one is a ValueError") {
  ts::manual_seed(4);
  auto block = nn::make_module<Block>();
  ts::Tensor x = ts::rand({2, 4});
  CHECK(ts::equal(block(x), (*block)(x)));  // model(x), as libtorch's holders are called
  CHECK(block->fc.weight.sizes() == Shape{3, 4});
  auto copy = block;  // shares, as a shared_ptr
  CHECK(copy.get() == block.get());
  nn::Sequential sequence;
  sequence.push_back(block);  // the Sequential shares it too
  CHECK(ts::equal(sequence(x), block(x)));

  nn::ModuleHolder<Block> empty;
  CHECK_FALSE(empty);
  for (auto use : std::vector<std::function<void()>>{[&] { empty(x); }, [&] { (void)empty->fc; }, [&] { (void)*empty; }}) {
    CHECK_THROWS_WITH_AS(use(), "ModuleHolder: the holder is empty (no module was given)", ts::ValueError);
  }
}
