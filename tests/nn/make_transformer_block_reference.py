#!/usr/bin/python3
"""Writes tests/nn/transformer_block_reference.safetensors: a GPT-2 block in PyTorch 1.13.

The block is what a user writes (nanoGPT's Block without dropout): x + attn(ln_1(x)), then
x + mlp(ln_2(x)), with causal self-attention (c_attn Linear(C, 3C) split into q, k, v, heads
[B, H, T, D], softmax(q k^T / sqrt(D) + causal mask) v written out, as PyTorch 2.x's math
path computes F.scaled_dot_product_attention; torch 1.13 has no such function) and an MLP
(c_fc Linear(C, 4C), GELU with the tanh approximation, c_proj Linear(4C, C)); LayerNorm eps
1e-5. For float32 and float64 from the same values: the block's parameters under their
PyTorch names ("<dtype>/ln_1.weight", ...), the input "x", an upstream gradient
"grad_output", the output "output", and "grad/x" and "grad/<parameter>" for every gradient.

Run with Debian's python3-torch (CPU): /usr/bin/python3 tests/nn/make_transformer_block_reference.py
"""

import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import safetensors_torch  # noqa: E402

OUTPUT = os.path.join(HERE, "transformer_block_reference.safetensors")
B, T, C, H = 2, 24, 32, 4


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(C // H))
        keep = torch.ones(T, T, dtype=torch.bool).tril()
        y = torch.softmax(scores.masked_fill(~keep, float("-inf")), -1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    block = Block().double()
    with torch.no_grad():  # LayerNorm's affine parameters away from their 1 and 0 initialisation
        for ln in (block.ln_1, block.ln_2):
            ln.weight.copy_(1 + 0.2 * torch.randn(C, dtype=torch.float64))
            ln.bias.copy_(0.1 * torch.randn(C, dtype=torch.float64))
    x64 = torch.randn(B, T, C, dtype=torch.float64)
    grad64 = torch.randn(B, T, C, dtype=torch.float64)
    tensors = {}
    for name, dtype in (("f32", torch.float32), ("f64", torch.float64)):
        model = Block().to(dtype)
        model.load_state_dict({k: v.to(dtype) for k, v in block.state_dict().items()})
        x = x64.to(dtype).requires_grad_()
        y = model(x)
        y.backward(grad64.to(dtype))
        tensors.update({f"{name}/{k}": v.detach().clone() for k, v in model.state_dict().items()})
        tensors[f"{name}/x"] = x.detach().clone()
        tensors[f"{name}/grad_output"] = grad64.to(dtype)
        tensors[f"{name}/output"] = y.detach()
        tensors[f"{name}/grad/x"] = x.grad
        for k, p in model.named_parameters():
            tensors[f"{name}/grad/{k}"] = p.grad
    safetensors_torch.save(tensors, OUTPUT, {"generator": "tests/nn/make_transformer_block_reference.py",
                                             "torch_version": torch.__version__})
    print(f"wrote {OUTPUT}: {len(tensors)} tensors, {os.path.getsize(OUTPUT)} bytes")


if __name__ == "__main__":
    main()
