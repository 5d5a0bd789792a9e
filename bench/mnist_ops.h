// Every op of PyTorch's MNIST example network, one at a time, for the float32 accuracy
// measurements: bench/op_accuracy (beside PyTorch, bench/accuracy) and the accuracy test
// along the float64 SGD trajectory (tests/optim/test_float32_accuracy.cpp). PyTorch's side
// of the same table is bench/mnist_ops_torch.py.
//
// The ops' inputs are a StateDict: for op <op>, <op>.x, its parameters <op>.weight and
// <op>.bias, the gradient arriving from above <op>.dy (and nll_loss.target); for the whole
// network, net.x, net.target and the parameters net.<name>. mnist_op_inputs makes them from
// a model and a batch; run_mnist_ops computes, in the inputs' dtype and through autograd as
// training runs it, each op's <op>.y and gradients <op>.dx, <op>.dweight, <op>.dbias (no dx
// for conv1: training never needs it), and the whole network's net.loss, parameter
// gradients net.d<name> and the gradient arriving at the max-pool's input, net.dpool.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "../examples/mnist_net.h"
#include "tessera/tessera.h"

namespace mnist_ops {

namespace ts = tessera;

struct Op {
  std::string name;
  std::vector<std::string> parameters;  // besides x
  bool input_gradient;                  // whether training needs dx
  std::function<ts::Tensor(const ts::StateDict& in, const std::map<std::string, ts::Tensor>& leaves)> forward;
};

inline const std::vector<Op>& ops() {
  static const std::vector<Op> table = [] {
    auto conv = [](const ts::StateDict&, const auto& l) { return ts::conv2d(l.at("x"), l.at("weight"), l.at("bias")); };
    auto linear = [](const ts::StateDict&, const auto& l) { return ts::linear(l.at("x"), l.at("weight"), l.at("bias")); };
    auto relu = [](const ts::StateDict&, const auto& l) { return ts::relu(l.at("x")); };
    return std::vector<Op>{
        {"conv1", {"weight", "bias"}, false, conv},
        {"relu1", {}, true, relu},
        {"conv2", {"weight", "bias"}, true, conv},
        {"relu2", {}, true, relu},
        {"pool", {}, true, [](const ts::StateDict&, const auto& l) { return ts::max_pool2d(l.at("x"), 2); }},
        {"fc1", {"weight", "bias"}, true, linear},
        {"relu3", {}, true, relu},
        {"fc2", {"weight", "bias"}, true, linear},
        {"log_softmax", {}, true, [](const ts::StateDict&, const auto& l) { return ts::log_softmax(l.at("x"), 1); }},
        {"nll_loss", {}, true,
         [](const ts::StateDict& in, const auto& l) { return ts::nll_loss(l.at("x"), in.at("nll_loss.target")); }},
    };
  }();
  return table;
}

// The parameter `parameter` of op `op` in `model` (conv1.weight, ...).
inline ts::Tensor parameter_of(mnist::Net& model, const std::string& op, const std::string& parameter) {
  for (const auto& [name, value] : model.named_parameters()) {
    if (name == op + "." + parameter) return value;
  }
  return {};
}

// Each op's input, parameters and incoming gradient in `model`'s forward and backward on
// (x, target), in the model's dtype (the caller rounds them), and the whole network's.
inline ts::StateDict mnist_op_inputs(mnist::Net& model, const ts::Tensor& x, const ts::Tensor& target) {
  ts::StateDict in;
  std::vector<ts::Tensor> inputs, outputs;  // per op, each input a leaf: the chain is followed by hand
  ts::Tensor h = x;
  for (const Op& op : ops()) {
    std::map<std::string, ts::Tensor> leaves{{"x", h.detach().requires_grad_(true)}};
    for (const std::string& p : op.parameters) leaves[p] = parameter_of(model, op.name, p).detach();
    in.insert(op.name + ".x", leaves["x"].detach());
    for (const std::string& p : op.parameters) in.insert(op.name + "." + p, leaves[p]);
    if (op.name == "nll_loss") in.insert("nll_loss.target", target);
    ts::Tensor y = op.forward(in, leaves);
    inputs.push_back(leaves["x"]);
    outputs.push_back(y);
    h = op.name == "pool" ? y.flatten(1) : y;
  }
  ts::Tensor dy = ts::ones({}, {.dtype = x.dtype()});
  for (size_t i = ops().size(); i-- > 0;) {
    in.insert(ops()[i].name + ".dy", dy);
    if (i == 0) break;
    outputs[i].backward(dy);
    dy = inputs[i].grad().reshape(outputs[i - 1].sizes());
  }
  in.insert("net.x", x);
  in.insert("net.target", target);
  for (const auto& [name, value] : model.named_parameters()) in.insert("net." + name, value.detach());
  return in;
}

// Every op's results on `in` (see the top of the file).
inline ts::StateDict run_mnist_ops(const ts::StateDict& in) {
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
  // The whole network, as training runs it (eval mode: no dropout).
  mnist::Net model;
  model.to(in.at("net.x").dtype());
  ts::StateDict weights;
  for (const auto& [name, value] : model.state_dict()) weights.insert(name, in.at("net." + name));
  model.load_state_dict(weights);
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
  return out;
}

}  // namespace mnist_ops
