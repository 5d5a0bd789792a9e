#!/usr/bin/python3
"""Writes tests/tensor/bf16_matmul_reference.safetensors: PyTorch 1.13's bfloat16 matmul and
linear on the CPU (oneDNN: float32 sums, each result rounded to bfloat16 once), for
tests/tensor/test_bf16_gemm.cpp.

Operands are standard normal draws (float64, fixed seed) rounded to bfloat16. Cases, entries
under "<case>/": "a", "b" and "output" = torch.matmul(a, b) (a or b stored transposed where
the case says so, the product taken of its .t()); the "linear" case "input", "weight",
"bias", "output" = F.linear, a bfloat16 "grad_output" and the gradients "grad_input",
"grad_weight" and "grad_bias" it backpropagates. The case table (shapes, transposes) is
the file's "cases" metadata as JSON.

Run with Debian's python3-torch (CPU): /usr/bin/python3 tests/tensor/make_bf16_matmul_reference.py
"""

import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "golden"))
import golden_file  # noqa: E402

OUTPUT = os.path.join(HERE, "bf16_matmul_reference.safetensors")

# name: (a's shape as stored, b's shape as stored, a transposed, b transposed). The shapes
# are no multiple of the AVX512-BF16 kernel's 8 x 48 tile and k is odd in some.
MATMUL_CASES = {
    "mm_odd": ([37, 45], [45, 61], False, False),
    "mm_deep": ([40, 600], [600, 70], False, False),
    "mm_a_transposed": ([33, 29], [33, 50], True, False),
    "mm_b_transposed": ([29, 257], [50, 257], False, True),
    "bmm": ([3, 19, 40], [3, 40, 27], False, False),
    "matvec": ([50, 77], [77], False, False),
}
LINEAR = {"input": [2, 13, 96], "weight": [130, 96]}


def randn(generator, *shape):
    return torch.randn(*shape, generator=generator, dtype=torch.float64).to(torch.bfloat16)


def main():
    golden_file.use_one_deterministic_thread()
    generator = torch.Generator().manual_seed(2026_12_07)
    tensors, table = {}, {}
    for name, (a_shape, b_shape, a_t, b_t) in MATMUL_CASES.items():
        a, b = randn(generator, *a_shape), randn(generator, *b_shape)
        out = torch.matmul(a.t() if a_t else a, b.t() if b_t else b)
        tensors.update({f"{name}/a": a, f"{name}/b": b, f"{name}/output": out})
        table[name] = {"a_transposed": a_t, "b_transposed": b_t}
    x = randn(generator, *LINEAR["input"]).requires_grad_()
    w = randn(generator, *LINEAR["weight"]).requires_grad_()
    bias = randn(generator, LINEAR["weight"][0]).requires_grad_()
    y = F.linear(x, w, bias)
    grad_output = randn(generator, *y.shape)
    y.backward(grad_output)
    tensors.update({"linear/input": x.detach(), "linear/weight": w.detach(), "linear/bias": bias.detach(),
                    "linear/output": y.detach(), "linear/grad_output": grad_output, "linear/grad_input": x.grad,
                    "linear/grad_weight": w.grad, "linear/grad_bias": bias.grad})
    table["linear"] = LINEAR
    golden_file.write(OUTPUT, tensors, table, "tests/tensor/make_bf16_matmul_reference.py")


if __name__ == "__main__":
    main()
