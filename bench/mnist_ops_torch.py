"""PyTorch's side of mnist_ops.h: every op of PyTorch's MNIST example network, one at a time,
for the float32 accuracy measurements (bench/accuracy, and the golden of the accuracy test,
tests/optim/make_float32_accuracy_golden.py). The inputs and results are named as in
mnist_ops.h: <op>.x, <op>.weight, <op>.bias, <op>.dy -> <op>.y, <op>.dx, <op>.dweight,
<op>.dbias; net.* for the whole network.
"""

import torch
import torch.nn.functional as F

from torch_mnist_net import Net

# name, parameters, whether training needs the input gradient, forward in PyTorch
OPS = [
    ("conv1", ("weight", "bias"), False, lambda x, p, t: F.conv2d(x, p["weight"], p["bias"])),
    ("relu1", (), True, lambda x, p, t: F.relu(x)),
    ("conv2", ("weight", "bias"), True, lambda x, p, t: F.conv2d(x, p["weight"], p["bias"])),
    ("relu2", (), True, lambda x, p, t: F.relu(x)),
    ("pool", (), True, lambda x, p, t: F.max_pool2d(x, 2)),
    ("fc1", ("weight", "bias"), True, lambda x, p, t: F.linear(x, p["weight"], p["bias"])),
    ("relu3", (), True, lambda x, p, t: F.relu(x)),
    ("fc2", ("weight", "bias"), True, lambda x, p, t: F.linear(x, p["weight"], p["bias"])),
    ("log_softmax", (), True, lambda x, p, t: F.log_softmax(x, dim=1)),
    ("nll_loss", (), True, lambda x, p, t: F.nll_loss(x, t)),
]


def op_inputs(model, x, target):
    """Each op's input, parameters and incoming gradient in the float64 forward and
    backward, rounded to float32."""
    acts = {}

    def through(name, fn, value, params=None):
        value = value.detach().requires_grad_(True)
        acts[name] = {"x": value, "params": params or {}}
        out = fn(value)
        acts[name]["y"] = out
        return out

    h = through("conv1", lambda v: F.conv2d(v, model.conv1.weight, model.conv1.bias), x,
                {"weight": model.conv1.weight, "bias": model.conv1.bias})
    h = through("relu1", F.relu, h)
    h = through("conv2", lambda v: F.conv2d(v, model.conv2.weight, model.conv2.bias), h,
                {"weight": model.conv2.weight, "bias": model.conv2.bias})
    h = through("relu2", F.relu, h)
    h = through("pool", lambda v: F.max_pool2d(v, 2), h)
    h = torch.flatten(h, 1)
    h = through("fc1", lambda v: F.linear(v, model.fc1.weight, model.fc1.bias), h,
                {"weight": model.fc1.weight, "bias": model.fc1.bias})
    h = through("relu3", F.relu, h)
    h = through("fc2", lambda v: F.linear(v, model.fc2.weight, model.fc2.bias), h,
                {"weight": model.fc2.weight, "bias": model.fc2.bias})
    h = through("log_softmax", lambda v: F.log_softmax(v, dim=1), h)
    through("nll_loss", lambda v: F.nll_loss(v, target), h)
    # Each op's incoming gradient, from the last op back (each op's input is a detached
    # copy of the previous output, so the chain is followed by hand).
    names = [op[0] for op in OPS]
    grads = {"nll_loss": torch.ones((), dtype=torch.float64)}
    for i in range(len(names) - 1, 0, -1):
        name, previous = names[i], names[i - 1]
        (dx,) = torch.autograd.grad(acts[name]["y"], acts[name]["x"], grads[name])
        grads[previous] = dx.reshape(acts[previous]["y"].shape)
    tensors = {}
    for name in names:
        tensors[f"{name}.x"] = acts[name]["x"].detach().float().contiguous()
        for p, value in acts[name]["params"].items():
            tensors[f"{name}.{p}"] = value.detach().float().contiguous()
        tensors[f"{name}.dy"] = grads[name].detach().float().contiguous()
    tensors["nll_loss.target"] = target
    tensors["net.x"] = x.float()
    tensors["net.target"] = target
    for name, value in model.state_dict().items():
        tensors[f"net.{name}"] = value.float()
    return tensors


def compute_torch(tensors, dtype):
    """Each op's output and gradients in `dtype`, on the float32 inputs widened exactly."""
    results = {}
    for name, params, input_gradient, forward in OPS:
        x = tensors[f"{name}.x"].to(dtype).requires_grad_(input_gradient)
        p = {k: tensors[f"{name}.{k}"].to(dtype).requires_grad_(True) for k in params}
        y = forward(x, p, tensors.get("nll_loss.target"))
        y.backward(tensors[f"{name}.dy"].to(dtype))
        results[f"{name}.y"] = y.detach()
        if input_gradient:
            results[f"{name}.dx"] = x.grad
        for k in params:
            results[f"{name}.d{k}"] = p[k].grad
    # The whole network at the float32 parameters, widened.
    model = Net()
    model.load_state_dict({name: tensors[f"net.{name}"] for name in model.state_dict()})
    model.to(dtype).eval()
    pool_input = F.relu(model.conv2(F.relu(model.conv1(tensors["net.x"].to(dtype)))))
    pool_input.retain_grad()
    h = F.relu(model.fc1(torch.flatten(F.max_pool2d(pool_input, 2), 1)))
    loss = F.nll_loss(F.log_softmax(model.fc2(h), dim=1), tensors["net.target"])
    loss.backward()
    results["net.loss"] = loss.detach()
    results["net.dpool"] = pool_input.grad
    for name, parameter in model.named_parameters():
        results[f"net.d{name}"] = parameter.grad
    return results


def errors(value, reference):
    difference = (value.double() - reference).abs()
    scale = reference.abs().max().item()
    return {"max": difference.max().item() / scale if scale else difference.max().item(),
            "rms": (difference.norm() / reference.norm()).item() if reference.norm() else difference.norm().item()}


RESULT_NAMES = {"y": "forward", "dx": "input gradient", "dweight": "weight gradient", "dbias": "bias gradient",
                "loss": "loss", "dpool": "max-pool input gradient"}
RESULT_NAMES.update({f"d{layer}.{kind}": f"{layer}.{kind} gradient" for layer in ("conv1", "conv2", "fc1", "fc2")
                     for kind in ("weight", "bias")})


def sgd_update(parameters, grads, buffers, dtype, lr, momentum):
    """One step of SGD with momentum (torch.optim.SGD, foreach=False) in `dtype` from the
    given parameters, gradients and momentum buffers (None before the first step): the new
    parameters and buffers, by name."""
    params = {name: value.to(dtype).clone().requires_grad_(True) for name, value in parameters.items()}
    optimizer = torch.optim.SGD(list(params.values()), lr=lr, momentum=momentum, foreach=False)
    for name, p in params.items():
        p.grad = grads[name].to(dtype).clone()
        if buffers is not None:
            optimizer.state[p]["momentum_buffer"] = buffers[name].to(dtype).clone()
    optimizer.step()
    return ({name: p.detach() for name, p in params.items()},
            {name: optimizer.state[p]["momentum_buffer"] for name, p in params.items()})
