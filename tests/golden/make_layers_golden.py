#!/usr/bin/python3
"""Writes tests/golden/layers.safetensors: PyTorch's answers for the transformer layers.

Ops: F.layer_norm, F.gelu (approximate none and tanh), torch.erf and F.embedding (with
padding_idx, scale_grad_by_freq and max_norm). For every case: the inputs, PyTorch's
output, a fixed upstream gradient and PyTorch's gradients, as tensors named
"<case>/<role>" (roles: input, weight, bias, indices, output, grad_output, grad_input,
grad_weight, grad_bias, and for max_norm weight_after: the table after its in-place
renormalisation). The case table (op, dtype, options) is JSON in the metadata entry
"cases", so tests/golden/test_layers_golden.cpp runs exactly what was computed here.
Every case exists in float32 and float64 with the same values; seeds are fixed, so
running this again gives the same file. PyTorch runs on one thread: its layer_norm weight
gradient sums rows per thread, and one thread is the order Tessera uses at any count.

Run with Debian's python3-torch (CPU): /usr/bin/python3 tests/golden/make_layers_golden.py
The C++ tests read the committed file and do not need PyTorch.
"""

import os

import torch
import torch.nn.functional as F

import golden_file

OUTPUT = os.path.join(golden_file.HERE, "layers.safetensors")
DTYPES = golden_file.FLOAT_DTYPES

# (name, op, options). Shapes are small: the file stays well under 1 MB.
CASES = [
    # layer_norm: GPT-2's width; rows shorter than one AVX2 vector, with a tail, long enough
    # for a deep Welford cascade; without affine, weight only, bias only; several dims; a
    # large common offset (the variance's cancellation); another eps.
    ("ln_gpt2_width", "layer_norm", dict(input=[2, 2, 768], normalized_shape=[768], weight=True, bias=True,
                                          eps=1e-5, offset=0.5)),
    ("ln_short_rows", "layer_norm", dict(input=[6, 3], normalized_shape=[3], weight=True, bias=True, eps=1e-5,
                                         offset=0.0)),
    ("ln_vector_and_tail", "layer_norm", dict(input=[5, 9], normalized_shape=[9], weight=True, bias=True, eps=1e-5,
                                              offset=1.0)),
    ("ln_long_rows", "layer_norm", dict(input=[1, 2100], normalized_shape=[2100], weight=True, bias=True, eps=1e-5,
                                        offset=-2.0)),
    ("ln_no_affine", "layer_norm", dict(input=[3, 130], normalized_shape=[130], weight=False, bias=False, eps=1e-5,
                                        offset=0.0)),
    ("ln_weight_only", "layer_norm", dict(input=[4, 33], normalized_shape=[33], weight=True, bias=False, eps=1e-5,
                                          offset=0.0)),
    ("ln_bias_only", "layer_norm", dict(input=[4, 17], normalized_shape=[17], weight=False, bias=True, eps=1e-5,
                                        offset=0.0)),
    ("ln_two_dims", "layer_norm", dict(input=[2, 3, 4, 5], normalized_shape=[4, 5], weight=True, bias=True,
                                       eps=1e-5, offset=0.0)),
    ("ln_large_offset", "layer_norm", dict(input=[3, 64], normalized_shape=[64], weight=True, bias=True, eps=1e-5,
                                           offset=1000.0)),
    ("ln_eps", "layer_norm", dict(input=[4, 40], normalized_shape=[40], weight=True, bias=True, eps=1e-2,
                                  offset=0.0, scale=0.05)),
    # gelu and erf over a wide range, zero and the tails included.
    ("gelu_none", "gelu", dict(input=[500], approximate="none")),
    ("gelu_tanh", "gelu", dict(input=[500], approximate="tanh")),
    ("gelu_none_rows", "gelu", dict(input=[7, 37], approximate="none")),
    ("erf", "erf", dict(input=[500])),
    # embedding: repeats, padding (also given negative), frequency scaling, max_norm.
    ("emb_basic", "embedding", dict(num_embeddings=10, dim=4, indices=[2, 6], padding_idx=None,
                                    scale_grad_by_freq=False, max_norm=None, norm_type=2.0)),
    ("emb_wide", "embedding", dict(num_embeddings=50, dim=70, indices=[4, 16], padding_idx=None,
                                   scale_grad_by_freq=False, max_norm=None, norm_type=2.0)),
    ("emb_padding", "embedding", dict(num_embeddings=10, dim=5, indices=[3, 7], padding_idx=1,
                                      scale_grad_by_freq=False, max_norm=None, norm_type=2.0)),
    ("emb_padding_negative", "embedding", dict(num_embeddings=8, dim=3, indices=[12], padding_idx=-1,
                                               scale_grad_by_freq=False, max_norm=None, norm_type=2.0)),
    ("emb_scale_grad_by_freq", "embedding", dict(num_embeddings=6, dim=19, indices=[3, 8], padding_idx=None,
                                                 scale_grad_by_freq=True, max_norm=None, norm_type=2.0)),
    ("emb_scale_and_padding", "embedding", dict(num_embeddings=6, dim=4, indices=[20], padding_idx=2,
                                                scale_grad_by_freq=True, max_norm=None, norm_type=2.0)),
    ("emb_max_norm", "embedding", dict(num_embeddings=12, dim=6, indices=[2, 9], padding_idx=None,
                                       scale_grad_by_freq=False, max_norm=1.5, norm_type=2.0)),
    ("emb_max_norm_p1", "embedding", dict(num_embeddings=12, dim=6, indices=[15], padding_idx=None,
                                          scale_grad_by_freq=False, max_norm=3.0, norm_type=1.0)),
]


def run_case(name, op, options, dtype_name, seed):
    dtype = DTYPES[dtype_name]
    g = torch.Generator().manual_seed(seed)
    out = {}

    def draw(shape, scale=1.0, offset=0.0):
        return torch.randn(shape, generator=g, dtype=torch.float64) * scale + offset

    def leaf(role, values):
        t = values.to(dtype).requires_grad_()
        out[role] = t
        return t

    grads = []
    if op == "layer_norm":
        x = leaf("input", draw(options["input"], options.get("scale", 1.0), options["offset"]))
        shape = options["normalized_shape"]
        w = leaf("weight", draw(shape, 0.5, 1.0)) if options["weight"] else None
        b = leaf("bias", draw(shape, 0.5)) if options["bias"] else None
        y = F.layer_norm(x, shape, w, b, options["eps"])
        grads = [("grad_input", x), ("grad_weight", w), ("grad_bias", b)]
    elif op == "gelu":
        x = leaf("input", draw(options["input"], 3.0))
        with torch.no_grad():  # exact values at both tails and at zero
            flat = x.view(-1)
            flat[:5] = torch.tensor([0.0, -10.0, 10.0, -0.5, 6.0], dtype=dtype)
        y = F.gelu(x, approximate=options["approximate"])
        grads = [("grad_input", x)]
    elif op == "erf":
        x = leaf("input", draw(options["input"], 1.5))
        y = torch.erf(x)
        grads = [("grad_input", x)]
    elif op == "embedding":
        n, dim = options["num_embeddings"], options["dim"]
        values = draw([n, dim]).to(dtype)
        out["weight"] = values.clone()  # as drawn: max_norm renormalises the leaf in place
        w = values.requires_grad_()
        # Indices from a few rows only, so that repeats (and the padding row) occur.
        indices = torch.randint(0, n, options["indices"], generator=g)
        if options["padding_idx"] is not None:
            indices.view(-1)[::3] = options["padding_idx"] % n
        out["indices"] = indices
        y = F.embedding(indices, w, padding_idx=options["padding_idx"], max_norm=options["max_norm"],
                        norm_type=options["norm_type"], scale_grad_by_freq=options["scale_grad_by_freq"])
        if options["max_norm"] is not None:
            out["weight_after"] = w.detach().clone()
        grads = [("grad_weight", w)]
    else:
        raise ValueError(op)

    grad_output = golden_file.backward_from_random_gradient(y, g, dtype)
    out["output"] = y
    out["grad_output"] = grad_output
    for role, tensor in grads:
        if tensor is not None:
            out[role] = tensor.grad
    return golden_file.case_tensors(name, dtype_name, out)


def main():
    golden_file.use_one_deterministic_thread()
    tensors = {}
    table = []
    for index, (name, op, options) in enumerate(CASES):
        for dtype_name in DTYPES:
            case_name = f"{name}_{dtype_name.lower()}"
            # The seed depends on the case, not the dtype: f32 and f64 see the same values.
            seed = 2000 + index
            tensors.update(run_case(name, op, options, dtype_name, seed))
            table.append(dict(name=case_name, op=op, dtype=dtype_name, **options))
    golden_file.write(OUTPUT, tensors, table, "tests/golden/make_layers_golden.py")


if __name__ == "__main__":
    main()
