#!/usr/bin/python3
"""Writes tests/golden/foundation.safetensors: PyTorch's answers for Tessera's foundation ops.

For every case: the inputs, PyTorch's output, a fixed upstream gradient and PyTorch's
gradients with respect to the inputs, as tensors named "<case>/<role>" (roles: input,
weight, bias, target, output, grad_output, grad_input, grad_weight, grad_bias). The case
table itself (op, dtype, options) is JSON in the metadata entry "cases", so that
tests/golden/test_golden.cpp runs exactly what was computed here. Every case exists in
float32 and float64. Seeds are fixed: running this again gives the same file.

Run with Debian's python3-torch (CPU): /usr/bin/python3 tests/golden/make_golden.py
The C++ tests read the committed file and do not need PyTorch.
"""

import os

import torch
import torch.nn.functional as F

import golden_file

OUTPUT = os.path.join(golden_file.HERE, "foundation.safetensors")
DTYPES = golden_file.FLOAT_DTYPES

# (name, op, options, input shapes). Shapes are small: the file stays well under 1 MB.
CASES = [
    ("conv2d_basic", "conv2d", dict(stride=[1, 1], padding=[0, 0], dilation=[1, 1], bias=True),
     dict(input=[2, 3, 8, 8], weight=[4, 3, 3, 3])),
    ("conv2d_stride2_pad1", "conv2d", dict(stride=[2, 2], padding=[1, 1], dilation=[1, 1], bias=True),
     dict(input=[2, 3, 9, 7], weight=[5, 3, 3, 3])),
    ("conv2d_dilation_nobias", "conv2d", dict(stride=[1, 2], padding=[2, 1], dilation=[2, 1], bias=False),
     dict(input=[1, 2, 10, 9], weight=[3, 2, 3, 2])),
    ("conv2d_1x1_stride_asym", "conv2d", dict(stride=[2, 1], padding=[0, 0], dilation=[1, 1], bias=True),
     dict(input=[2, 3, 6, 5], weight=[4, 3, 1, 1])),
    ("conv2d_wide", "conv2d", dict(stride=[1, 1], padding=[1, 1], dilation=[1, 1], bias=True),
     dict(input=[2, 8, 10, 10], weight=[16, 8, 3, 3])),
    ("max_pool2d_k2", "max_pool2d", dict(kernel=[2, 2], stride=[2, 2], padding=[0, 0]),
     dict(input=[2, 3, 8, 8])),
    ("max_pool2d_k3_s2_p1", "max_pool2d", dict(kernel=[3, 3], stride=[2, 2], padding=[1, 1]),
     dict(input=[2, 3, 9, 9])),
    ("max_pool2d_asym", "max_pool2d", dict(kernel=[3, 2], stride=[1, 2], padding=[1, 0]),
     dict(input=[1, 2, 7, 8])),
    ("linear_3d", "linear", dict(bias=True), dict(input=[2, 3, 5], weight=[4, 5])),
    ("linear_nobias", "linear", dict(bias=False), dict(input=[6, 5], weight=[3, 5])),
    ("linear_wide", "linear", dict(bias=True), dict(input=[4, 7, 64], weight=[32, 64])),
    ("log_softmax_dim0", "log_softmax", dict(dim=0), dict(input=[4, 6])),
    ("log_softmax_dim1", "log_softmax", dict(dim=1), dict(input=[4, 6])),
    ("log_softmax_3d_last", "log_softmax", dict(dim=-1), dict(input=[2, 3, 5])),
    ("nll_loss_mean", "nll_loss", dict(reduction="mean", ignore_index=-100, weight=False), dict(input=[6, 5])),
    ("nll_loss_sum", "nll_loss", dict(reduction="sum", ignore_index=-100, weight=False), dict(input=[6, 5])),
    ("nll_loss_none", "nll_loss", dict(reduction="none", ignore_index=-100, weight=False), dict(input=[6, 5])),
    ("nll_loss_weight", "nll_loss", dict(reduction="mean", ignore_index=-100, weight=True), dict(input=[6, 5])),
    ("nll_loss_ignore_index", "nll_loss", dict(reduction="mean", ignore_index=2, weight=False), dict(input=[8, 5])),
    ("nll_loss_weight_ignore_none", "nll_loss", dict(reduction="none", ignore_index=-100, weight=True),
     dict(input=[8, 5])),
    ("cross_entropy_mean", "cross_entropy", dict(reduction="mean", ignore_index=-100, weight=False),
     dict(input=[6, 5])),
    ("cross_entropy_weight_sum", "cross_entropy", dict(reduction="sum", ignore_index=-100, weight=True),
     dict(input=[6, 5])),
    ("cross_entropy_ignore_none", "cross_entropy", dict(reduction="none", ignore_index=1, weight=False),
     dict(input=[8, 5])),
]


def targets(rows, classes, ignore_index, with_ignored, generator):
    t = torch.randint(0, classes, (rows,), generator=generator)
    if with_ignored:  # rows 1 and 4 take the ignore index (-100 or a class)
        t[1] = ignore_index
        t[4] = ignore_index
    return t


def run_case(name, op, options, shapes, dtype_name, seed):
    dtype = DTYPES[dtype_name]
    g = torch.Generator().manual_seed(seed)
    out = {}

    def leaf(role, shape, scale=1.0):
        t = (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype).requires_grad_()
        out[role] = t
        return t

    if op == "conv2d":
        x = leaf("input", shapes["input"])
        w = leaf("weight", shapes["weight"], 0.5)
        b = leaf("bias", [shapes["weight"][0]]) if options["bias"] else None
        y = F.conv2d(x, w, b, stride=options["stride"], padding=options["padding"], dilation=options["dilation"])
        params = [("grad_input", x), ("grad_weight", w)] + ([("grad_bias", b)] if b is not None else [])
    elif op == "max_pool2d":
        x = leaf("input", shapes["input"])
        y = F.max_pool2d(x, options["kernel"], options["stride"], options["padding"])
        params = [("grad_input", x)]
    elif op == "linear":
        x = leaf("input", shapes["input"])
        w = leaf("weight", shapes["weight"], 0.5)
        b = leaf("bias", [shapes["weight"][0]]) if options["bias"] else None
        y = F.linear(x, w, b)
        params = [("grad_input", x), ("grad_weight", w)] + ([("grad_bias", b)] if b is not None else [])
    elif op == "log_softmax":
        x = leaf("input", shapes["input"], 2.0)
        y = F.log_softmax(x, options["dim"])
        params = [("grad_input", x)]
    elif op in ("nll_loss", "cross_entropy"):
        rows, classes = shapes["input"]
        if op == "nll_loss":  # log-probabilities as a leaf, as a network's log_softmax gives them
            raw = torch.randn(shapes["input"], generator=g, dtype=torch.float64)
            x = F.log_softmax(raw, 1).to(dtype).requires_grad_()
            out["input"] = x
        else:
            x = leaf("input", shapes["input"], 2.0)
        t = targets(rows, classes, options["ignore_index"], "ignore" in name, g)
        out["target"] = t
        weight = None
        if options["weight"]:
            weight = (torch.rand(classes, generator=g, dtype=torch.float64) + 0.5).to(dtype)
            out["weight"] = weight
        loss = F.nll_loss if op == "nll_loss" else F.cross_entropy
        y = loss(x, t, weight=weight, ignore_index=options["ignore_index"], reduction=options["reduction"])
        params = [("grad_input", x)]
    else:
        raise ValueError(op)

    grad_output = golden_file.backward_from_random_gradient(y, g, dtype)
    out["output"] = y
    out["grad_output"] = grad_output
    for role, tensor in params:
        out[role] = tensor.grad
    return golden_file.case_tensors(name, dtype_name, out)


def main():
    golden_file.use_one_deterministic_thread()
    tensors = {}
    table = []
    for index, (name, op, options, shapes) in enumerate(CASES):
        for dtype_name in DTYPES:
            case_name = f"{name}_{dtype_name.lower()}"
            # The seed depends on the case, not the dtype: f32 and f64 see the same values.
            tensors.update(run_case(name, op, options, shapes, dtype_name, seed=1000 + index))
            table.append(dict(name=case_name, op=op, dtype=dtype_name, **options))
    golden_file.write(OUTPUT, tensors, table, "tests/golden/make_golden.py")


if __name__ == "__main__":
    main()
