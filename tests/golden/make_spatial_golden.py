#!/usr/bin/python3
"""Writes tests/golden/spatial.safetensors: PyTorch's answers for the spatial and
index-contraction ops of issue 29 (torch.einsum, F.pad in its four modes, F.unfold, F.fold
and F.interpolate in nearest, nearest-exact, linear, bilinear and trilinear modes).

For every case: its inputs ("input" or "input_<i>" for einsum's operands), PyTorch's output,
a fixed upstream gradient ("grad_output") and the gradients of the inputs ("grad_<role>"), as
tensors named "<case>/<role>". The case table (op, dtype and options) is JSON in the metadata
entry "cases", so that tests/golden/test_spatial_golden.cpp runs exactly what was computed
here. Every case exists in float32 and float64 from the same values. Seeds are fixed: running
this again gives the same file.

Run with Debian's python3-torch (CPU): /usr/bin/python3 tests/golden/make_spatial_golden.py
The C++ test reads the committed file and does not need PyTorch.
"""

import os

import torch
import torch.nn.functional as F

import golden_file

OUTPUT = os.path.join(golden_file.HERE, "spatial.safetensors")
FLOATS = golden_file.FLOAT_DTYPES

# (name, op, options, input shapes). "permute" permutes input 0 before the op (a
# non-contiguous operand).
CASES = [
    ("einsum_batched_matmul", "einsum", dict(equation="bij,bjk->bik"), [[2, 3, 4], [2, 4, 5]]),
    ("einsum_transpose", "einsum", dict(equation="ij->ji"), [[3, 4]]),
    ("einsum_diagonal", "einsum", dict(equation="ii->i"), [[4, 4]]),
    ("einsum_trace", "einsum", dict(equation="ii"), [[4, 4]]),
    ("einsum_batched_diagonal", "einsum", dict(equation="bii->bi"), [[2, 3, 3]]),
    ("einsum_implicit_matmul", "einsum", dict(equation="ij,jk"), [[3, 4], [4, 5]]),
    ("einsum_implicit_sorted", "einsum", dict(equation="kj,ji"), [[3, 4], [4, 5]]),
    ("einsum_outer", "einsum", dict(equation="i,j->ij"), [[3], [4]]),
    ("einsum_attention_scores", "einsum", dict(equation="bhqd,bhkd->bhqk"), [[2, 2, 3, 4], [2, 2, 5, 4]]),
    ("einsum_ellipsis_broadcast", "einsum", dict(equation="...ij,...jk->...ik"), [[2, 1, 3, 4], [3, 4, 2]]),
    ("einsum_ellipsis_implicit", "einsum", dict(equation="...ij,jk"), [[2, 3, 4], [4, 5]]),
    ("einsum_sum_single_operand_letters", "einsum", dict(equation="ij,kj->i"), [[3, 4], [5, 4]]),
    ("einsum_three_operands", "einsum", dict(equation="ij,jk,kl->il"), [[3, 4], [4, 5], [5, 2]]),
    ("einsum_bilinear_form", "einsum", dict(equation="bn,anm,bm->ba"), [[2, 3], [4, 3, 5], [2, 5]]),
    ("einsum_sum_all", "einsum", dict(equation="ijk->"), [[2, 3, 4]]),
    ("einsum_permuted_operand", "einsum", dict(equation="ij,jk->ik", permute=[1, 0]), [[4, 3], [4, 5]]),
    ("pad_constant", "pad", dict(pad=[1, 2, 0, 1], mode="constant", value=0.5), [[2, 3, 4, 5]]),
    ("pad_constant_negative", "pad", dict(pad=[-1, 2, 1, -2], mode="constant", value=0.0), [[2, 3, 4, 5]]),
    ("pad_constant_three_dims", "pad", dict(pad=[1, 0, 0, 2, 1, 1], mode="constant", value=-1.0), [[2, 3, 4]]),
    ("pad_reflect", "pad", dict(pad=[2, 1, 3, 1], mode="reflect"), [[2, 3, 5, 6]]),
    ("pad_reflect_1d", "pad", dict(pad=[3, 2], mode="reflect"), [[2, 3, 6]]),
    ("pad_reflect_permuted", "pad", dict(pad=[1, 2, 2, 0], mode="reflect", permute=[0, 1, 3, 2]), [[2, 3, 5, 4]]),
    ("pad_replicate", "pad", dict(pad=[2, 3, 1, 0], mode="replicate"), [[2, 3, 4, 5]]),
    ("pad_replicate_3d", "pad", dict(pad=[1, 1, 2, 0, 0, 1], mode="replicate"), [[1, 2, 3, 4, 3]]),
    ("pad_circular", "pad", dict(pad=[1, 2, 2, 1], mode="circular"), [[2, 3, 4, 5]]),
    ("pad_circular_1d_full", "pad", dict(pad=[5, 5], mode="circular"), [[2, 3, 5]]),
    ("unfold_3x3", "unfold", dict(kernel_size=[3, 3], dilation=[1, 1], padding=[0, 0], stride=[1, 1]), [[2, 3, 6, 7]]),
    ("unfold_all_options", "unfold", dict(kernel_size=[3, 2], dilation=[2, 1], padding=[1, 2], stride=[2, 3]),
     [[1, 2, 7, 8]]),
    ("unfold_permuted", "unfold", dict(kernel_size=[2, 2], dilation=[1, 1], padding=[1, 0], stride=[2, 1],
                                       permute=[0, 1, 3, 2]), [[2, 2, 5, 4]]),
    ("fold_2x2", "fold", dict(output_size=[5, 6], kernel_size=[2, 2], dilation=[1, 1], padding=[0, 0],
                              stride=[1, 1]), [[2, 12, 20]]),
    ("fold_all_options", "fold", dict(output_size=[7, 8], kernel_size=[3, 2], dilation=[2, 1], padding=[1, 2],
                                      stride=[2, 3]), [[1, 12, 12]]),
    ("interpolate_nearest_size", "interpolate", dict(mode="nearest", size=[7, 3]), [[2, 3, 4, 5]]),
    ("interpolate_nearest_scale2", "interpolate", dict(mode="nearest", scale_factor=[2.0]), [[1, 2, 3, 4]]),
    ("interpolate_nearest_fractional_scale", "interpolate", dict(mode="nearest", scale_factor=[1.7, 0.6]),
     [[1, 2, 5, 4]]),
    ("interpolate_nearest_1d", "interpolate", dict(mode="nearest", size=[8]), [[2, 3, 5]]),
    ("interpolate_nearest_exact", "interpolate", dict(mode="nearest-exact", size=[7, 3]), [[2, 3, 4, 5]]),
    ("interpolate_bilinear", "interpolate", dict(mode="bilinear", size=[7, 9], align_corners=False),
     [[2, 3, 4, 5]]),
    ("interpolate_bilinear_default_corners", "interpolate", dict(mode="bilinear", size=[6, 8]), [[1, 2, 3, 5]]),
    ("interpolate_bilinear_align_corners", "interpolate", dict(mode="bilinear", size=[7, 3], align_corners=True),
     [[2, 3, 4, 5]]),
    ("interpolate_bilinear_scale", "interpolate", dict(mode="bilinear", scale_factor=[1.5], align_corners=False),
     [[1, 2, 4, 5]]),
    ("interpolate_bilinear_downsample", "interpolate", dict(mode="bilinear", size=[3, 4], align_corners=False),
     [[1, 2, 8, 7]]),
    ("interpolate_bilinear_permuted", "interpolate",
     dict(mode="bilinear", size=[5, 7], align_corners=True, permute=[0, 1, 3, 2]), [[1, 2, 4, 3]]),
    ("interpolate_linear", "interpolate", dict(mode="linear", size=[10], align_corners=False), [[2, 3, 6]]),
    ("interpolate_linear_align_corners", "interpolate", dict(mode="linear", size=[10], align_corners=True),
     [[2, 3, 6]]),
    ("interpolate_trilinear", "interpolate", dict(mode="trilinear", size=[4, 6, 3], align_corners=False),
     [[1, 2, 3, 4, 5]]),
]


def run_op(op, options, inputs):
    """PyTorch's output for the case."""
    xs = list(inputs)
    if "permute" in options:
        xs[0] = xs[0].permute(options["permute"])
    if op == "einsum":
        return torch.einsum(options["equation"], *xs)
    x = xs[0]
    if op == "pad":
        if options["mode"] == "constant":
            return F.pad(x, options["pad"], mode="constant", value=options["value"])
        return F.pad(x, options["pad"], mode=options["mode"])
    windows = {k: tuple(options[k]) for k in ("kernel_size", "dilation", "padding", "stride") if k in options}
    if op == "unfold":
        return F.unfold(x, **windows)
    if op == "fold":
        return F.fold(x, tuple(options["output_size"]), **windows)
    if op == "interpolate":
        size = options.get("size")
        scale = options.get("scale_factor")
        return F.interpolate(x, size=None if size is None else (size[0] if len(size) == 1 else tuple(size)),
                             scale_factor=None if scale is None else (scale[0] if len(scale) == 1 else tuple(scale)),
                             mode=options["mode"], align_corners=options.get("align_corners"))
    raise ValueError(op)


def run_case(name, op, options, shapes, dtype_name, seed):
    dtype = FLOATS[dtype_name]
    g = torch.Generator().manual_seed(seed)
    roles = ["input"] if len(shapes) == 1 else [f"input_{i}" for i in range(len(shapes))]
    inputs = [torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).requires_grad_() for shape in shapes]
    y = run_op(op, options, inputs)
    grad_output = golden_file.backward_from_random_gradient(y, g, dtype)
    out = dict(zip(roles, inputs))
    out["output"] = y
    out["grad_output"] = grad_output
    for role, x in zip(roles, inputs):
        out["grad_" + role] = x.grad
    return golden_file.case_tensors(name, dtype_name, out)


def main():
    golden_file.use_one_deterministic_thread()
    tensors, table = {}, []
    for index, (name, op, options, shapes) in enumerate(CASES):
        for dtype_name in FLOATS:
            # The seed depends on the case, not the dtype: float32 and float64 see the same values.
            tensors.update(run_case(name, op, options, shapes, dtype_name, seed=2900 + index))
            table.append(dict(name=f"{name}_{dtype_name.lower()}", op=op, dtype=dtype_name, **options))
    golden_file.write(OUTPUT, tensors, table, "tests/golden/make_spatial_golden.py")


if __name__ == "__main__":
    main()
