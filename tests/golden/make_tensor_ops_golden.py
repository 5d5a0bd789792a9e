#!/usr/bin/python3
"""Writes tests/golden/tensor_ops.safetensors: PyTorch's answers for the tensor ops of the
transformer issue (masks, flip, indexing, selection, scans, softmax over any dim, losses with
ignore_index and label smoothing, comparisons and the bool dtype).

For every case: its inputs, PyTorch's outputs ("output" or "output_<i>" for ops with several),
fixed upstream gradients ("grad_output" / "grad_output_<i>") and the gradients of the
differentiable inputs ("grad_<role>"), as tensors named "<case>/<role>". The case table
(op, dtype and options) is JSON in the metadata entry "cases", so that
tests/golden/test_tensor_ops_golden.cpp runs exactly what was computed here. Floating cases
exist in float32 and float64 from the same values; bool results are stored as BOOL, as
PyTorch writes torch.bool. Seeds are fixed: running this again gives the same file.

Run with Debian's python3-torch (CPU): /usr/bin/python3 tests/golden/make_tensor_ops_golden.py
The C++ test reads the committed file and does not need PyTorch.
"""

import os

import torch
import torch.nn.functional as F

import golden_file

OUTPUT = os.path.join(golden_file.HERE, "tensor_ops.safetensors")
FLOATS = golden_file.FLOAT_DTYPES

# (name, op, options, input shape). Every case runs in float32 and float64 unless its
# options say "dtypes".
CASES = [
    ("masked_fill_attention", "masked_fill", dict(mask_shape=[4, 1], value=-1e9), [3, 4, 5]),
    ("masked_fill_mask_larger", "masked_fill", dict(mask_shape=[2, 1, 4, 5], value=0.5), [4, 1]),
    ("tril_main", "tril", dict(diagonal=0), [2, 5, 6]),
    ("tril_above", "tril", dict(diagonal=2), [5, 6]),
    ("triu_below", "triu", dict(diagonal=-1), [2, 6, 5]),
    ("triu_main_permuted", "triu", dict(diagonal=0, permute=[0, 2, 1]), [2, 5, 6]),
    ("split_sizes", "split", dict(sizes=[3, 3, 4], dim=1), [4, 10]),
    ("split_size", "split", dict(split_size=3, dim=0), [4, 6]),
    ("chunk_last_dim", "chunk", dict(chunks=3, dim=-1), [2, 3, 7]),
    ("index_select_repeated", "index_select", dict(dim=1, index=[3, 0, 3, 1, 2]), [5, 4, 3]),
    ("index_select_dim0", "index_select", dict(dim=0, index=[4, 4, 0]), [5, 6]),
    ("gather_dim1", "gather", dict(dim=1, index_shape=[4, 3]), [4, 6]),
    ("gather_dim0_smaller_index", "gather", dict(dim=0, index_shape=[3, 2, 2]), [5, 3, 2]),
    ("scatter_add_dim0", "scatter_add", dict(dim=0, index_shape=[3, 5]), [4, 5]),
    ("scatter_add_dim1", "scatter_add", dict(dim=1, index_shape=[3, 6]), [3, 4]),
    ("topk_largest", "topk", dict(k=3, dim=1, largest=True), [4, 10]),
    ("topk_smallest_dim0", "topk", dict(k=2, dim=0, largest=False), [6, 3]),
    ("topk_all_permuted", "topk", dict(k=5, dim=-1, largest=True, permute=[1, 0]), [5, 4]),
    ("cumsum_long_rows", "cumsum", dict(dim=1), [3, 200]),
    ("cumsum_dim0", "cumsum", dict(dim=0), [7, 3, 2]),
    ("cumsum_int64", "cumsum", dict(dim=-1, dtypes=["I64"]), [3, 9]),
    ("softmax_dim0", "softmax", dict(dim=0), [3, 4, 5]),
    ("softmax_dim1", "softmax", dict(dim=1), [3, 4, 5]),
    ("softmax_last_permuted", "softmax", dict(dim=-1, permute=[2, 0, 1]), [3, 4, 5]),
    ("log_softmax_dim0_permuted", "log_softmax", dict(dim=0, permute=[1, 0, 2]), [3, 4, 5]),
    ("log_softmax_dim2", "log_softmax", dict(dim=2), [3, 4, 5]),
    ("log_softmax_minus2", "log_softmax", dict(dim=-2), [2, 3, 4, 5]),
    ("nll_loss_3d_ignore_weight", "nll_loss", dict(reduction="mean", ignore_index=-100, weight=True), [3, 5, 4]),
    ("nll_loss_4d_none", "nll_loss", dict(reduction="none", ignore_index=2, weight=False), [2, 4, 3, 2]),
    ("cross_entropy_smoothing", "cross_entropy",
     dict(reduction="mean", ignore_index=-100, weight=False, label_smoothing=0.1), [8, 5]),
    ("cross_entropy_smoothing_weight_ignore", "cross_entropy",
     dict(reduction="mean", ignore_index=1, weight=True, label_smoothing=0.2), [8, 5]),
    ("cross_entropy_smoothing_sum", "cross_entropy",
     dict(reduction="sum", ignore_index=-100, weight=True, label_smoothing=0.3), [6, 4]),
    ("cross_entropy_smoothing_none", "cross_entropy",
     dict(reduction="none", ignore_index=0, weight=True, label_smoothing=0.15), [6, 4]),
    ("cross_entropy_4d_smoothing_weight_ignore", "cross_entropy",
     dict(reduction="mean", ignore_index=-100, weight=True, label_smoothing=0.25), [2, 5, 3, 4]),
    ("cross_entropy_3d_ignore", "cross_entropy",
     dict(reduction="mean", ignore_index=3, weight=False, label_smoothing=0.0), [4, 6, 5]),
    ("cross_entropy_1d", "cross_entropy",
     dict(reduction="mean", ignore_index=-100, weight=False, label_smoothing=0.05), [7]),
    ("comparisons", "comparisons", dict(), [4, 6]),
    ("logical", "logical", dict(dtypes=["BOOL"]), [5, 4]),
    ("flip_first_and_last", "flip", dict(dims=[0, 2]), [2, 3, 4]),
    ("flip_negative_permuted", "flip", dict(dims=[-1, 1], permute=[2, 0, 1]), [3, 4, 5]),
    ("flip_int64", "flip", dict(dims=[1], dtypes=["I64"]), [3, 5]),
]


def make_inputs(op, options, shape, dtype, g):
    """The case's inputs: (tensors by role, the differentiable roles)."""
    roles, grads = {}, []

    def floats(shape_, scale=1.0):
        return (torch.randn(shape_, generator=g, dtype=torch.float64) * scale).to(dtype)

    def leaf(role, shape_, scale=1.0):
        roles[role] = floats(shape_, scale).requires_grad_()
        grads.append(role)

    if op in ("masked_fill",):
        leaf("input", shape)
        roles["mask"] = torch.rand(options["mask_shape"], generator=g) > 0.5
    elif op in ("tril", "triu", "flip", "split", "chunk", "index_select", "cumsum", "softmax", "log_softmax"):
        if dtype == torch.int64:
            roles["input"] = torch.randint(-5, 6, shape, generator=g)
        else:
            leaf("input", shape, 2.0 if op in ("softmax", "log_softmax") else 1.0)
        if op == "index_select":
            roles["index"] = torch.tensor(options["index"], dtype=torch.int64)
    elif op == "gather":
        leaf("input", shape)
        size = shape[options["dim"]]
        roles["index"] = torch.randint(0, size, options["index_shape"], generator=g)
    elif op == "scatter_add":
        leaf("input", shape)
        leaf("src", options["index_shape"])
        roles["index"] = torch.randint(0, shape[options["dim"]], options["index_shape"], generator=g)
    elif op == "topk":
        # A permutation of spread-out values: no ties, in either dtype.
        values = torch.randperm(int(torch.tensor(shape).prod()), generator=g).to(torch.float64) * 0.37 - 3.0
        roles["input"] = values.reshape(shape).to(dtype).requires_grad_()
        grads.append("input")
    elif op in ("nll_loss", "cross_entropy"):
        classes = shape[0] if len(shape) == 1 else shape[1]
        target_shape = [] if len(shape) == 1 else [shape[0]] + shape[2:]
        if op == "nll_loss":  # log-probabilities as a network's log_softmax gives them
            roles["input"] = F.log_softmax(torch.randn(shape, generator=g, dtype=torch.float64), 1).to(dtype)
            roles["input"].requires_grad_()
            grads.append("input")
        else:
            leaf("input", shape, 2.0)
        target = torch.randint(0, classes, target_shape, generator=g)
        flat = target.view(-1)
        if flat.numel() > 4:  # two positions take the ignore index (-100 or a class)
            flat[1] = options["ignore_index"]
            flat[4] = options["ignore_index"]
        roles["target"] = target
        if options["weight"]:
            roles["weight"] = (torch.rand(classes, generator=g, dtype=torch.float64) + 0.5).to(dtype)
    elif op == "comparisons":
        # Small integers as floats: many ties.
        roles["input"] = torch.randint(-2, 3, shape, generator=g).to(dtype)
        roles["other"] = torch.randint(-2, 3, shape[-1:], generator=g).to(dtype)
    elif op == "logical":
        roles["input"] = torch.rand(shape, generator=g) > 0.5
        roles["other"] = torch.rand(shape[-1:], generator=g) > 0.3
    else:
        raise ValueError(op)
    return roles, grads


def run_op(op, options, roles):
    """PyTorch's outputs, as a list."""
    x = roles["input"]
    if "permute" in options:
        x = x.permute(options["permute"])
    if op == "masked_fill":
        return [x.masked_fill(roles["mask"], options["value"])]
    if op == "tril":
        return [torch.tril(x, options["diagonal"])]
    if op == "triu":
        return [torch.triu(x, options["diagonal"])]
    if op == "flip":
        return [torch.flip(x, options["dims"])]
    if op == "split":
        arg = options["sizes"] if "sizes" in options else options["split_size"]
        return list(torch.split(x, arg, options["dim"]))
    if op == "chunk":
        return list(torch.chunk(x, options["chunks"], options["dim"]))
    if op == "index_select":
        return [torch.index_select(x, options["dim"], roles["index"])]
    if op == "gather":
        return [torch.gather(x, options["dim"], roles["index"])]
    if op == "scatter_add":
        return [torch.scatter_add(x, options["dim"], roles["index"], roles["src"])]
    if op == "topk":
        values, indices = torch.topk(x, options["k"], options["dim"], options["largest"], sorted=True)
        return [values, indices]
    if op == "cumsum":
        return [torch.cumsum(x, options["dim"])]
    if op == "softmax":
        return [F.softmax(x, options["dim"])]
    if op == "log_softmax":
        return [F.log_softmax(x, options["dim"])]
    if op == "nll_loss":
        return [F.nll_loss(x, roles["target"], weight=roles.get("weight"), ignore_index=options["ignore_index"],
                           reduction=options["reduction"])]
    if op == "cross_entropy":
        return [F.cross_entropy(x, roles["target"], weight=roles.get("weight"), ignore_index=options["ignore_index"],
                                reduction=options["reduction"], label_smoothing=options["label_smoothing"])]
    if op == "comparisons":
        y = roles["other"]
        return [x == y, x != y, x < y, x <= y, x > y, x >= y, (x > y).sum(), torch.where(x > y, x, y)]
    if op == "logical":
        y = roles["other"]
        return [~x, x & y, x | y, x ^ y, torch.logical_and(x, y), x.sum(1), x.cumsum(1), x == y]
    raise ValueError(op)


def run_case(name, op, options, shape, dtype_name, seed):
    dtype = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "BOOL": torch.bool}[dtype_name]
    g = torch.Generator().manual_seed(seed)
    roles, grads = make_inputs(op, options, shape, dtype, g)
    outputs = run_op(op, options, roles)
    out = golden_file.with_outputs_and_gradients(roles, grads, outputs, g)
    return golden_file.case_tensors(name, dtype_name, out)


def main():
    golden_file.use_one_deterministic_thread()
    tensors, table = {}, []
    for index, (name, op, options, shape) in enumerate(CASES):
        for dtype_name in options.get("dtypes", list(FLOATS)):
            case_name = f"{name}_{dtype_name.lower()}"
            # The seed depends on the case, not the dtype: float32 and float64 see the same values.
            tensors.update(run_case(name, op, options, shape, dtype_name, seed=2000 + index))
            table.append(dict(name=case_name, op=op, dtype=dtype_name,
                              **{k: v for k, v in options.items() if k != "dtypes"}))
    golden_file.write(OUTPUT, tensors, table, "tests/golden/make_tensor_ops_golden.py")


if __name__ == "__main__":
    main()
