#!/usr/bin/python3
"""Writes tests/golden/attention.safetensors: PyTorch's answers for scaled dot-product attention.

torch 1.13 has no F.scaled_dot_product_attention, so the reference is PyTorch 2.x's math
path written out: softmax(q k^T * scale + mask) v, with is_causal as a tril mask
(upper-left aligned when L != S), boolean masks as masked_fill(~mask, -inf), and rows
whose every key is masked giving 0 (PyTorch >= 2.5's _safe_softmax; its backward uses the
zeroed result, so no NaN reaches a gradient). No dropout here: its bits are Tessera's
(tests/nn/test_attention.cpp checks them against dropout() of the weights).

For every case: q, k, v (and mask), PyTorch's output, a fixed upstream gradient and the
gradients of q, k and v, named "<case>/<role>". The case table (options) is JSON in the
metadata entry "cases". Every case exists in float32 and float64 with the same values.
Cases marked "transposed" store q, k, v as [B, T, H, D] (the layout GPT code makes before
its transpose(1, 2)); the C++ test feeds their transposed, non-contiguous views.

Run with Debian's python3-torch (CPU): /usr/bin/python3 tests/golden/make_attention_golden.py
"""

import json
import math
import os
import sys

import torch

import golden_file

OUTPUT = os.path.join(golden_file.HERE, "attention.safetensors")
DTYPES = golden_file.FLOAT_DTYPES

# (name, options, batch dims, L, S, E, Ev). The "several_tiles" cases cover more than one of
# the CPU kernel's default tiles (64 queries x 256 keys).
CASES = [
    ("plain", dict(mask="none", is_causal=False, scale=None), [2, 3], 17, 23, 8, 5),
    ("scale", dict(mask="none", is_causal=False, scale=0.3), [2, 2], 9, 12, 6, 6),
    ("causal_square", dict(mask="none", is_causal=True, scale=None), [2, 1], 33, 33, 8, 8),
    ("causal_fewer_queries", dict(mask="none", is_causal=True, scale=None), [1, 2], 9, 20, 8, 4),
    ("causal_more_queries", dict(mask="none", is_causal=True, scale=None), [1, 2], 20, 9, 8, 4),
    ("bool_mask_broadcast", dict(mask="bool", mask_shape=[17, 23], is_causal=False, scale=None), [2, 3], 17, 23, 8, 5),
    ("float_mask_per_batch", dict(mask="float", mask_shape=[2, 1, 11, 14], is_causal=False, scale=0.5),
     [2, 3], 11, 14, 8, 8),
    ("three_dims", dict(mask="bool", mask_shape=[4, 7, 10], is_causal=False, scale=None), [4], 7, 10, 5, 3),
    ("several_tiles", dict(mask="none", is_causal=False, scale=None), [1, 1], 70, 260, 16, 8),
    ("several_tiles_causal", dict(mask="none", is_causal=True, scale=None), [1, 1], 140, 140, 8, 8),
    ("from_transposed", dict(mask="none", is_causal=True, scale=None, transposed=True), [2, 3], 19, 19, 8, 8),
]


def attention(q, k, v, mask, is_causal, scale):
    length, source = q.size(-2), k.size(-2)
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if is_causal:
        keep = torch.ones(length, source, dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    no_key = torch.isneginf(scores).all(-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(no_key, 0.0), -1).masked_fill(no_key, 0.0)
    return weights @ v


def make_mask(kind, shape, g):
    if kind == "bool":
        mask = torch.rand(shape, generator=g) < 0.75
        mask[..., 3, :] = False  # a row with no key: its output is 0
        return mask
    mask = torch.randn(shape, generator=g, dtype=torch.float64)
    mask[torch.rand(shape, generator=g) < 0.2] = float("-inf")
    return mask


def run_case(name, options, batch, length, source, head_dim, value_dim, dtype_name, seed):
    dtype = DTYPES[dtype_name]
    g = torch.Generator().manual_seed(seed)
    transposed = options.get("transposed", False)

    def leaf(dims):
        shape = batch + dims
        if transposed:  # [B, H, T, D] values drawn as [B, T, H, D]
            shape = [batch[0], dims[0], batch[1], dims[1]]
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).requires_grad_()

    q, k, v = leaf([length, head_dim]), leaf([source, head_dim]), leaf([source, value_dim])
    out = {"q": q, "k": k, "v": v}
    mask = None
    if options["mask"] != "none":
        mask = make_mask(options["mask"], options["mask_shape"], g)
        if mask.dtype != torch.bool:
            mask = mask.to(dtype)
        out["mask"] = mask
    views = [t.transpose(1, 2) if transposed else t for t in (q, k, v)]
    y = attention(*views, mask, options["is_causal"], options["scale"])
    grad_output = golden_file.backward_from_random_gradient(y, g, dtype)
    out.update(output=y, grad_output=grad_output, grad_q=q.grad, grad_k=k.grad, grad_v=v.grad)
    assert all(torch.isfinite(t).all() for role, t in out.items() if role != "mask"), name
    return golden_file.case_tensors(name, dtype_name, out)


def main():
    golden_file.use_one_deterministic_thread()
    tensors = {}
    table = []
    for index, (name, options, batch, length, source, head_dim, value_dim) in enumerate(CASES):
        for dtype_name in DTYPES:
            tensors.update(run_case(name, options, batch, length, source, head_dim, value_dim, dtype_name,
                                    seed=2000 + index))
            table.append(dict(name=f"{name}_{dtype_name.lower()}", dtype=dtype_name, mask=options["mask"],
                              transposed=options.get("transposed", False), is_causal=options["is_causal"],
                              scale=options["scale"]))
    golden_file.write(OUTPUT, tensors, table, "tests/golden/make_attention_golden.py")


if __name__ == "__main__":
    main()
