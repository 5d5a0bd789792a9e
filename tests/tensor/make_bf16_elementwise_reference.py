#!/usr/bin/python3
"""Writes tests/tensor/bf16_elementwise_reference.safetensors: PyTorch 1.13's bfloat16
element-wise ops on the CPU (each operand widened to float32, the result rounded to bfloat16
once), for tests/tensor/test_bf16_elementwise.cpp.

Entries: "a" [7, 33] and "b" [33] (broadcast over a's rows), standard normal draws rounded to
bfloat16, "positive" = |a| + 0.25 for log, sqrt and reciprocal; then "<op>" for each op of
the case table (the file's "cases" metadata): unary ops of a (or of positive), binary ops of
(a, b), comparisons as bool, "add_scaled" = a[:, :32].add(b[:32], alpha=0.3) (rows of 32:
PyTorch 1.13's vector loop, which rounds a + alpha * b once; its scalar loop over a row's tail
rounds alpha * b to bfloat16 first, see make_bf16_sgd_reference.py), "add_scalar" = a + 0.1,
"relu_backward" = the gradient "grad" through relu(a).

Run with Debian's python3-torch (CPU): /usr/bin/python3 tests/tensor/make_bf16_elementwise_reference.py
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "golden"))
import golden_file  # noqa: E402

OUTPUT = os.path.join(HERE, "bf16_elementwise_reference.safetensors")

UNARY = ["neg", "abs", "sign", "exp", "relu", "sigmoid", "tanh", "sin", "cos"]
UNARY_POSITIVE = ["log", "sqrt", "reciprocal"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum"]
COMPARISONS = ["eq", "ne", "lt", "le", "gt", "ge"]


def main():
    golden_file.use_one_deterministic_thread()
    generator = torch.Generator().manual_seed(2026_12_07)
    a = torch.randn(7, 33, generator=generator, dtype=torch.float64).to(torch.bfloat16)
    b = torch.randn(33, generator=generator, dtype=torch.float64).to(torch.bfloat16)
    b[::5] = a[0, ::5]  # some equal pairs, so eq/le/ge see ties
    positive = a.abs() + 0.25
    tensors = {"a": a, "b": b, "positive": positive}
    for name in UNARY:
        tensors[name] = getattr(torch, name)(a)
    for name in UNARY_POSITIVE:
        tensors[name] = getattr(torch, name)(positive)
    for name in BINARY + COMPARISONS:
        tensors[name] = getattr(torch, name)(a, b)
    tensors["add_scaled"] = a[:, :32].add(b[:32], alpha=0.3)
    tensors["add_scalar"] = a + 0.1
    x = a.clone().requires_grad_()
    grad = torch.randn(7, 33, generator=generator, dtype=torch.float64).to(torch.bfloat16)
    torch.relu(x).backward(grad)
    tensors["grad"] = grad
    tensors["relu_backward"] = x.grad
    table = {"unary": UNARY, "unary_positive": UNARY_POSITIVE, "binary": BINARY, "comparisons": COMPARISONS}
    golden_file.write(OUTPUT, tensors, table, "tests/tensor/make_bf16_elementwise_reference.py")


if __name__ == "__main__":
    main()
