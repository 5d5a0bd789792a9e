// Tessera's side of the per-op accuracy table (bench/accuracy runs it beside PyTorch): each
// op of the MNIST network, forward and backward through autograd as training runs it, on
// inputs read from a safetensors file, in the file's dtype; the outputs go to another file.
//
//   build/bench/op_accuracy INPUTS.safetensors OUTPUTS.safetensors
//
// For op <op> the inputs are <op>.x, its parameters <op>.weight and <op>.bias, the gradient
// arriving from above <op>.dy (and <op>.target for nll_loss); the outputs <op>.y and the
// gradients <op>.dx, <op>.dweight, <op>.dbias (no dx for conv1: training never needs it).
// The whole network, once, from net.x, net.target and the parameters net.<name>: the loss
// net.loss, the gradients net.d<name>, and the gradient arriving at the max-pool's input,
// net.dpool (where float32 and float64 choose different maxima, it moves).
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <string>

#include "../examples/mnist_net.h"
#include "tessera/io/safetensors.h"
#include "tessera/tessera.h"

namespace ts = tessera;

namespace {

struct Op {
  std::string name;
  std::vector<std::string> parameters;  // besides x
  bool input_gradient;
  std::function<ts::Tensor(const ts::StateDict& in, const std::map<std::string, ts::Tensor>& leaves)> forward;
};

std::vector<Op> ops() {
  auto leaf = [](const std::map<std::string, ts::Tensor>& leaves, const std::string& name) { return leaves.at(name); };
  return {
      {"conv1", {"weight", "bias"}, false,
       [=](const ts::StateDict&, const auto& l) { return ts::conv2d(leaf(l, "x"), leaf(l, "weight"), leaf(l, "bias")); }},
      {"relu1", {}, true, [=](const ts::StateDict&, const auto& l) { return ts::relu(leaf(l, "x")); }},
      {"conv2", {"weight", "bias"}, true,
       [=](const ts::StateDict&, const auto& l) { return ts::conv2d(leaf(l, "x"), leaf(l, "weight"), leaf(l, "bias")); }},
      {"relu2", {}, true, [=](const ts::StateDict&, const auto& l) { return ts::relu(leaf(l, "x")); }},
      {"pool", {}, true, [=](const ts::StateDict&, const auto& l) { return ts::max_pool2d(leaf(l, "x"), 2); }},
      {"fc1", {"weight", "bias"}, true,
       [=](const ts::StateDict&, const auto& l) { return ts::linear(leaf(l, "x"), leaf(l, "weight"), leaf(l, "bias")); }},
      {"relu3", {}, true, [=](const ts::StateDict&, const auto& l) { return ts::relu(leaf(l, "x")); }},
      {"fc2", {"weight", "bias"}, true,
       [=](const ts::StateDict&, const auto& l) { return ts::linear(leaf(l, "x"), leaf(l, "weight"), leaf(l, "bias")); }},
      {"log_softmax", {}, true, [=](const ts::StateDict&, const auto& l) { return ts::log_softmax(leaf(l, "x"), 1); }},
      {"nll_loss", {}, true,
       [=](const ts::StateDict& in, const auto& l) { return ts::nll_loss(leaf(l, "x"), in.at("nll_loss.target")); }},
  };
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: op_accuracy INPUTS.safetensors OUTPUTS.safetensors\n");
    return 2;
  }
  try {
    const ts::StateDict in = ts::io::load(argv[1]);
    ts::StateDict out;
    for (const Op& op : ops()) {
      std::map<std::string, ts::Tensor> leaves;
      leaves["x"] = in.at(op.name + ".x").clone().requires_grad_(op.input_gradient);
      for (const std::string& p : op.parameters) leaves[p] = in.at(op.name + "." + p).clone().requires_grad_(true);
      ts::Tensor y = op.forward(in, leaves);
      y.backward(in.at(op.name + ".dy"));
      out.insert(op.name + ".y", y.detach());
      if (op.input_gradient) out.insert(op.name + ".dx", leaves["x"].grad());
      for (const std::string& p : op.parameters) out.insert(op.name + ".d" + p, leaves[p].grad());
    }
    {  // the whole network, as training runs it (eval mode: no dropout)
      mnist::Net model;
      ts::StateDict weights;
      for (const auto& [name, value] : model.state_dict()) weights.insert(name, in.at("net." + name));
      model.load_state_dict(weights);
      model.to(in.at("net.x").dtype());
      model.eval();
      ts::Tensor pool_input = ts::relu(model.conv2(ts::relu(model.conv1(in.at("net.x")))));
      ts::Tensor pool_gradient;
      pool_input.register_hook([&pool_gradient](const ts::Tensor& grad) {
        pool_gradient = grad;
        return ts::Tensor();
      });
      ts::Tensor h = ts::relu(model.fc1(ts::max_pool2d(pool_input, 2).flatten(1)));
      ts::Tensor loss = ts::nll_loss(ts::log_softmax(model.fc2(h), 1), in.at("net.target"));
      loss.backward();
      out.insert("net.loss", loss.detach());
      out.insert("net.dpool", pool_gradient);
      for (const auto& [name, parameter] : model.named_parameters()) out.insert("net.d" + name, parameter.grad());
    }
    ts::io::save(out, argv[2]);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "op_accuracy: %s\n", error.what());
    return 1;
  }
  return 0;
}
