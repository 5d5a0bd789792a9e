#!/usr/bin/python3
"""Writes tests/golden/model_ops.safetensors: PyTorch's answers for the ops a model author
missed (issue 29): sin, cos, clamp, silu, logsumexp, var/std, amin/min, sort/argsort,
isnan/isinf/isfinite, one_hot, linspace, mse/l1/binary cross-entropy losses, conv1d,
avg_pool2d, group_norm and batch_norm over [N, C] and [N, C, L] (BatchNorm1d).

The layout is tests/golden/make_tensor_ops_golden.py's: per case its inputs, outputs
("output" or "output_<i>"), fixed upstream gradients ("grad_output..."), and the gradients of
the differentiable inputs ("grad_<role>"), as "<case>/<role>"; the case table is JSON in the
metadata entry "cases", and tests/golden/test_model_ops_golden.cpp runs exactly it.
Floating cases run in float32 and float64 from the same values. Seeds are fixed.

Run with Debian's python3-torch (CPU): /usr/bin/python3 tests/golden/make_model_ops_golden.py
"""

import os

import torch
import torch.nn.functional as F

import golden_file

OUTPUT = os.path.join(golden_file.HERE, "model_ops.safetensors")
FLOATS = golden_file.FLOAT_DTYPES

# (name, op, options, input shape).
CASES = [
    ("sin", "sin", dict(), [4, 7]),
    ("cos_permuted", "cos", dict(permute=[1, 0]), [5, 6]),
    ("clamp_both", "clamp", dict(min=-0.5, max=0.7), [6, 8]),
    ("clamp_min_only", "clamp", dict(min=0.1), [30]),
    ("clamp_max_only", "clamp", dict(max=-0.2), [3, 10]),
    ("clamp_min_above_max", "clamp", dict(min=0.5, max=-0.5), [12]),
    ("silu", "silu", dict(), [5, 9]),
    ("logsumexp_last", "logsumexp", dict(dims=[-1], keepdim=False), [4, 33]),
    ("logsumexp_two_dims_keep", "logsumexp", dict(dims=[0, 2], keepdim=True), [3, 4, 5]),
    ("logsumexp_all", "logsumexp", dict(dims=[], keepdim=False), [6, 7]),
    ("var_dim1", "var", dict(dims=[1], correction=1, keepdim=False), [5, 40]),
    ("var_biased_keep", "var", dict(dims=[0, 2], correction=0, keepdim=True), [6, 3, 7]),
    ("var_all", "var", dict(dims=[], correction=1, keepdim=False), [9, 11]),
    ("std_dim0", "std", dict(dims=[0], correction=1, keepdim=False), [50, 6]),
    ("amin_dims", "amin", dict(dims=[1], keepdim=False), [4, 9, 3]),
    ("min_dim_keep", "min_dim", dict(dim=0, keepdim=True), [8, 5]),
    ("sort_ascending", "sort", dict(dim=-1, descending=False), [4, 12]),
    ("sort_descending_dim0", "sort", dict(dim=0, descending=True), [9, 3]),
    ("float_classes", "float_classes", dict(), [24]),
    ("one_hot", "one_hot", dict(num_classes=7, dtypes=["I64"]), [3, 5]),
    ("one_hot_inferred", "one_hot", dict(num_classes=-1, dtypes=["I64"]), [11]),
    ("linspace_101", "linspace", dict(start=-1.5, end=2.25, steps=101), []),
    ("linspace_7", "linspace", dict(start=0.1, end=3.7, steps=7), []),
    ("linspace_int", "linspace", dict(start=-3, end=20, steps=9, dtypes=["I64"]), []),
    ("mse_loss_mean", "mse_loss", dict(reduction="mean"), [8, 5]),
    ("mse_loss_none", "mse_loss", dict(reduction="none"), [4, 3, 2]),
    ("l1_loss_sum", "l1_loss", dict(reduction="sum"), [7, 6]),
    ("bce_mean", "binary_cross_entropy", dict(reduction="mean", weight=False), [10, 3]),
    ("bce_weight_sum", "binary_cross_entropy", dict(reduction="sum", weight=True), [6, 4]),
    ("bce_logits_mean", "binary_cross_entropy_with_logits", dict(reduction="mean", weight=False, pos_weight=False),
     [9, 5]),
    ("bce_logits_pos_weight", "binary_cross_entropy_with_logits",
     dict(reduction="none", weight=True, pos_weight=True), [6, 4]),
    ("conv1d", "conv1d", dict(out_channels=5, kernel=3, stride=1, padding=1, dilation=1), [2, 4, 17]),
    ("conv1d_strided_dilated", "conv1d", dict(out_channels=3, kernel=4, stride=2, padding=3, dilation=2), [3, 2, 20]),
    ("avg_pool2d", "avg_pool2d", dict(kernel=[2, 2], stride=None, padding=[0, 0], count_include_pad=True), [2, 3, 8, 6]),
    ("avg_pool2d_padded", "avg_pool2d", dict(kernel=[3, 3], stride=[2, 2], padding=[1, 1], count_include_pad=True),
     [2, 2, 9, 7]),
    ("avg_pool2d_exclude_pad", "avg_pool2d",
     dict(kernel=[3, 2], stride=[1, 2], padding=[1, 1], count_include_pad=False), [1, 3, 6, 7]),
    ("group_norm", "group_norm", dict(groups=3, eps=1e-5), [4, 6, 5, 3]),
    ("group_norm_1d", "group_norm", dict(groups=2, eps=1e-3), [3, 8, 10]),
    ("batch_norm_2d_input", "batch_norm", dict(eps=1e-5, momentum=0.1), [16, 6]),
    ("batch_norm_3d_input", "batch_norm", dict(eps=1e-5, momentum=0.1), [5, 4, 9]),
]


def make_inputs(op, options, shape, dtype, g):
    """The case's inputs: (tensors by role, the differentiable roles)."""
    roles, grads = {}, []

    def floats(shape_, scale=1.0):
        return (torch.randn(shape_, generator=g, dtype=torch.float64) * scale).to(dtype)

    def leaf(role, shape_, scale=1.0):
        roles[role] = floats(shape_, scale).requires_grad_()
        grads.append(role)

    if op in ("sin", "cos", "clamp", "silu", "logsumexp", "var", "std", "mse_loss", "l1_loss",
              "binary_cross_entropy_with_logits", "conv1d", "avg_pool2d", "group_norm", "batch_norm"):
        leaf("input", shape, 3.0 if op in ("sin", "cos", "logsumexp") else 1.0)
    if op in ("amin", "min_dim", "sort"):
        # A permutation of spread-out values: no ties, in either dtype.
        values = torch.randperm(int(torch.tensor(shape).prod()), generator=g).to(torch.float64) * 0.37 - 3.0
        roles["input"] = values.reshape(shape).to(dtype).requires_grad_()
        grads.append("input")
    if op in ("mse_loss", "l1_loss"):
        leaf("target", shape)
    if op == "binary_cross_entropy":
        roles["input"] = torch.rand(shape, generator=g, dtype=torch.float64).mul(0.98).add(0.01).to(dtype)
        roles["input"].requires_grad_()
        grads.append("input")
    if op in ("binary_cross_entropy", "binary_cross_entropy_with_logits"):
        roles["target"] = torch.rand(shape, generator=g, dtype=torch.float64).to(dtype)
        if options["weight"]:
            roles["weight"] = (torch.rand(shape[-1:], generator=g, dtype=torch.float64) + 0.5).to(dtype)
        if options.get("pos_weight"):
            roles["pos_weight"] = (torch.rand(shape[-1:], generator=g, dtype=torch.float64) * 3).to(dtype)
    if op == "float_classes":
        values = floats(shape)
        values[1], values[5], values[9] = float("nan"), float("inf"), float("-inf")
        values[13] = torch.finfo(dtype).max
        values[17] = torch.finfo(dtype).tiny / 4  # subnormal
        roles["input"] = values
    if op == "one_hot":
        roles["input"] = torch.randint(0, 7, shape, generator=g)
    if op == "conv1d":
        leaf("weight", [options["out_channels"], shape[1], options["kernel"]], 0.5)
        leaf("bias", [options["out_channels"]])
    if op == "group_norm":
        leaf("weight", [shape[1]])
        leaf("bias", [shape[1]])
    if op == "batch_norm":
        leaf("weight", [shape[1]])
        leaf("bias", [shape[1]])
        roles["running_mean"] = floats([shape[1]], 0.1)
        roles["running_var"] = (torch.rand(shape[1], generator=g, dtype=torch.float64) + 0.5).to(dtype)
    return roles, grads


def run_op(op, options, roles, dtype):
    """PyTorch's outputs, as a list."""
    x = roles.get("input")
    if x is not None and "permute" in options:
        x = x.permute(options["permute"])
    if op == "sin":
        return [torch.sin(x)]
    if op == "cos":
        return [torch.cos(x)]
    if op == "clamp":
        return [torch.clamp(x, options.get("min"), options.get("max"))]
    if op == "silu":
        return [F.silu(x)]
    if op == "logsumexp":
        dims = options["dims"] or list(range(x.dim()))
        return [torch.logsumexp(x, dims, options["keepdim"])]
    if op in ("var", "std"):
        dims = options["dims"] or None
        f = torch.var if op == "var" else torch.std
        return [f(x, dims, correction=options["correction"], keepdim=options["keepdim"])]
    if op == "amin":
        return [torch.amin(x, options["dims"], options["keepdim"])]
    if op == "min_dim":
        values, indices = torch.min(x, options["dim"], options["keepdim"])
        return [values, indices]
    if op == "sort":
        values, indices = torch.sort(x, dim=options["dim"], descending=options["descending"], stable=True)
        return [values, indices, torch.argsort(x, options["dim"], options["descending"])]
    if op == "float_classes":
        return [torch.isnan(x), torch.isinf(x), torch.isfinite(x)]
    if op == "one_hot":
        return [F.one_hot(x, options["num_classes"])]
    if op == "linspace":
        return [torch.linspace(options["start"], options["end"], options["steps"], dtype=dtype)]
    if op == "mse_loss":
        return [F.mse_loss(x, roles["target"], reduction=options["reduction"])]
    if op == "l1_loss":
        return [F.l1_loss(x, roles["target"], reduction=options["reduction"])]
    if op == "binary_cross_entropy":
        return [F.binary_cross_entropy(x, roles["target"], weight=roles.get("weight"),
                                       reduction=options["reduction"])]
    if op == "binary_cross_entropy_with_logits":
        return [F.binary_cross_entropy_with_logits(x, roles["target"], weight=roles.get("weight"),
                                                   pos_weight=roles.get("pos_weight"),
                                                   reduction=options["reduction"])]
    if op == "conv1d":
        return [F.conv1d(x, roles["weight"], roles["bias"], options["stride"], options["padding"],
                         options["dilation"])]
    if op == "avg_pool2d":
        return [F.avg_pool2d(x, options["kernel"], options["stride"], options["padding"],
                             count_include_pad=options["count_include_pad"])]
    if op == "group_norm":
        return [F.group_norm(x, options["groups"], roles["weight"], roles["bias"], options["eps"])]
    if op == "batch_norm":
        running_mean, running_var = roles["running_mean"].clone(), roles["running_var"].clone()
        y = F.batch_norm(x, running_mean, running_var, roles["weight"], roles["bias"], True,
                         options["momentum"], options["eps"])
        return [y, running_mean, running_var]
    raise ValueError(op)


def run_case(name, op, options, shape, dtype_name, seed):
    dtype = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}[dtype_name]
    g = torch.Generator().manual_seed(seed)
    roles, grads = make_inputs(op, options, shape, dtype, g)
    outputs = run_op(op, options, roles, dtype)
    out = golden_file.with_outputs_and_gradients(roles, grads, outputs, g)
    return golden_file.case_tensors(name, dtype_name, out)


def main():
    golden_file.use_one_deterministic_thread()
    tensors, table = {}, []
    for index, (name, op, options, shape) in enumerate(CASES):
        for dtype_name in options.get("dtypes", list(FLOATS)):
            case_name = f"{name}_{dtype_name.lower()}"
            tensors.update(run_case(name, op, options, shape, dtype_name, seed=3000 + index))
            table.append(dict(name=case_name, op=op, dtype=dtype_name, shape=shape,
                              **{k: v for k, v in options.items() if k != "dtypes"}))
    golden_file.write(OUTPUT, tensors, table, "tests/golden/make_model_ops_golden.py")


if __name__ == "__main__":
    main()
