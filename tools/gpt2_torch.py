"""GPT-2 in PyTorch 1.13 with Hugging Face's GPT2LMHeadModel layout (transformers is not in
Debian, so this is its module tree written out): the same names, shapes and Conv1D [in, out]
weights as HF's and as Tessera's models::GPT2, so state dicts move between the three. Every
script that compares Tessera's GPT-2 with PyTorch uses this one (goldens, bench/).

    import sys; sys.path.insert(0, "tools")
    import gpt2_torch
    model = gpt2_torch.GPT2LMHeadModel(gpt2_torch.GPTConfig(n_layer=2, n_head=2, n_embd=32))
    logits = model(ids)                       # ids int64 [B, T] -> [B, T, vocab_size]
    groups = gpt2_torch.nanogpt_param_groups(model, weight_decay=0.1)

Attention is the math form (PyTorch 1.13 has no scaled_dot_product_attention): softmax of
the scaled, causally masked scores, dropout, times v. GELU is F.gelu(approximate="tanh"),
which is HF's gelu_new to rounding. Initialisation is GPT-2's (HF's _init_weights).
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    block_size: int = 1024
    vocab_size: int = 50257
    dropout: float = 0.0
    bias: bool = True


PRESETS = {
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768),
    "gpt2-medium": dict(n_layer=24, n_head=16, n_embd=1024),
    "gpt2-large": dict(n_layer=36, n_head=20, n_embd=1280),
    "gpt2-xl": dict(n_layer=48, n_head=25, n_embd=1600),
}


class Conv1D(nn.Module):
    """HF's Conv1D: y = x W + b, W [nx, nf]."""

    def __init__(self, nf, nx, bias=True):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf)) if bias else None
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        flat = x.reshape(-1, x.size(-1))
        y = torch.addmm(self.bias, flat, self.weight) if self.bias is not None else flat @ self.weight
        return y.view(size_out)


class GPT2Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head, self.n_embd = config.n_head, config.n_embd
        self.c_attn = Conv1D(3 * config.n_embd, config.n_embd, config.bias)
        self.c_proj = Conv1D(config.n_embd, config.n_embd, config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        weights = self.attn_dropout(F.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1))
        y = (weights @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class GPT2MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = Conv1D(4 * config.n_embd, config.n_embd, config.bias)
        self.c_proj = Conv1D(config.n_embd, 4 * config.n_embd, config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


def layer_norm(config):
    norm = nn.LayerNorm(config.n_embd, eps=1e-5)
    if not config.bias:
        norm.bias = None  # PyTorch 1.13's LayerNorm has no bias=False; None skips it
    return norm


class GPT2Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = layer_norm(config)
        self.attn = GPT2Attention(config)
        self.ln_2 = layer_norm(config)
        self.mlp = GPT2MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList([GPT2Block(config) for _ in range(config.n_layer)])
        self.ln_f = layer_norm(config)

    def forward(self, ids):
        positions = torch.arange(ids.size(1), device=ids.device)
        x = self.drop(self.wte(ids) + self.wpe(positions))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = GPT2Model(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as HF's tie_weights()
        nn.init.normal_(self.transformer.wte.weight, std=0.02)
        nn.init.normal_(self.transformer.wpe.weight, std=0.02)
        for block in self.transformer.h:
            for proj in (block.attn.c_proj, block.mlp.c_proj):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * config.n_layer))

    def forward(self, ids):
        return self.lm_head(self.transformer(ids))

    @torch.no_grad()
    def generate(self, ids, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        """nanoGPT's generate; temperature 0 is greedy."""
        for _ in range(max_new_tokens):
            window = ids[:, -self.config.block_size:]
            logits = self(window)[:, -1, :]
            if temperature == 0:
                token = logits.argmax(-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < v[:, [-1]]] = -float("inf")
                token = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
            ids = torch.cat((ids, token), dim=1)
        return ids


def nanogpt_param_groups(model, weight_decay):
    """nanoGPT's configure_optimizers groups: weight decay on the 2-D (and larger) tensors."""
    params = [p for p in model.parameters() if p.requires_grad]  # the tied weight once
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def nanogpt_lr(step, learning_rate, min_lr, warmup_steps, decay_steps):
    """nanoGPT's get_lr(it): linear warmup, then cosine decay to min_lr at decay_steps."""
    if step < warmup_steps:
        return learning_rate * (step + 1) / (warmup_steps + 1)
    if step > decay_steps:
        return min_lr
    ratio = (step - warmup_steps) / (decay_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


def hub_state_dict(model):
    """The state dict as the hub's model.safetensors holds it: GPT2Model's names (no
    "transformer."), no lm_head, and each block's causal-mask buffers attn.bias
    [1, 1, n_positions, n_positions] (float, 1 on and below the diagonal) and attn.masked_bias
    (-1e4), as older transformers versions saved them."""
    n = model.config.block_size
    out = {}
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":
            continue
        name = name[len("transformer."):]
        out[name] = tensor
        if name.endswith(".ln_1.bias") or (name.endswith(".ln_1.weight") and not model.config.bias):
            block = name[: name.index(".ln_1.")]
            out[block + ".attn.bias"] = torch.ones(n, n).tril().view(1, 1, n, n)
            out[block + ".attn.masked_bias"] = torch.tensor(-1e4)
    return out
