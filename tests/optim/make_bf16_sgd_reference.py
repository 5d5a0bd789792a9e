#!/usr/bin/python3
"""Writes tests/optim/data/bf16_sgd_reference.safetensors: PyTorch 1.13's torch.optim.SGD on
bfloat16 parameters (CPU, _single_tensor_sgd: every tensor op rounds to bfloat16), for
tests/optim/test_bf16_sgd.cpp.

Entries: "param" [4, 64], the initial parameter, and "grad/<step>" for 4 steps (standard normal
draws rounded to bfloat16); then "<case>/param/<step>" after each step for each case of the
table (the file's "cases" metadata: SGD's options by case name).

The shape is a multiple of 32 elements on purpose: PyTorch 1.13's bfloat16 add with alpha
takes two rules by position. Its vector loop (32 elements at a time on AVX-512, 16 on AVX2)
computes a + alpha * b in float32 and rounds once, as Tessera does; the scalar loop over the
remaining tail rounds alpha * b to bfloat16 first (c10::BFloat16's operator*), a second
rounding (measured on [5, 37]: the 3 elements that differ from Tessera are all in the tail of
25). With no tail, every element takes the vector rule.

Run with Debian's python3-torch (CPU): /usr/bin/python3 tests/optim/make_bf16_sgd_reference.py
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "golden"))
import golden_file  # noqa: E402

OUTPUT = os.path.join(HERE, "data", "bf16_sgd_reference.safetensors")
STEPS = 4
CASES = {
    "plain": {"lr": 0.1},
    "momentum": {"lr": 0.05, "momentum": 0.9},
    "momentum_dampening_decay": {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01},
    "nesterov_decay": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01, "nesterov": True},
    "maximize_momentum": {"lr": 0.1, "momentum": 0.5, "maximize": True},
}


def main():
    golden_file.use_one_deterministic_thread()
    generator = torch.Generator().manual_seed(2026_12_07)
    param = torch.randn(4, 64, generator=generator, dtype=torch.float64).to(torch.bfloat16)
    grads = [torch.randn(4, 64, generator=generator, dtype=torch.float64).to(torch.bfloat16) for _ in range(STEPS)]
    tensors = {"param": param}
    tensors.update({f"grad/{i}": g for i, g in enumerate(grads)})
    for name, options in CASES.items():
        p = param.clone().requires_grad_()
        optimizer = torch.optim.SGD([p], **options)
        for i, g in enumerate(grads):
            p.grad = g.clone()
            optimizer.step()
            tensors[f"{name}/param/{i}"] = p.detach().clone()
    golden_file.write(OUTPUT, tensors, CASES, "tests/optim/make_bf16_sgd_reference.py")


if __name__ == "__main__":
    main()
