#!/usr/bin/python3
"""Writes the GPT-2 goldens: a tiny GPT-2 (tools/gpt2_torch.py, Hugging Face's layout) on
PyTorch 1.13, from one set of initial weights and tokens.

  gpt2_tiny_hub.safetensors     the initial weights as the hub's model.safetensors holds
                                them: GPT2Model's names (no "transformer."), the causal-mask
                                buffers attn.bias / attn.masked_bias, no lm_head; float64
  gpt2_tiny_lm_head.safetensors the same weights as GPT2LMHeadModel.state_dict() gives them:
                                "transformer." names and lm_head.weight (= wte); float32
  gpt2_reference.safetensors    the tokens and, per dtype (f32/, f64/), what training and
                                generation give:
    tokens                      int64 [steps, B, T + 1]: step s trains on tokens[s, :, :T]
                                with targets tokens[s, :, 1:]; each row a progression
                                start + i * stride mod V (stride 1 to 3), so the loss falls
    <dtype>/logits              step 0's logits [B, T, V]
    <dtype>/grad_norm.<name>    step 0's gradient 2-norm of each parameter
    <dtype>/loss, lr, total_norm  [steps]: each step's loss (cross entropy, mean), learning
                                rate and gradient norm before clipping
    <dtype>/final.<name>        every parameter after the last step
    <dtype>/greedy              greedy generation from the initial weights: [B, P + N]
The training is nanoGPT's: AdamW (betas 0.9/0.95, eps 1e-8) with weight decay on the 2-D
parameters only, nanoGPT's get_lr (warmup, cosine to min_lr) through LambdaLR, and
clip_grad_norm_ before each step. Metadata: the config and the training settings, as JSON.

Run with Debian's python3-torch: /usr/bin/python3 tests/models/make_gpt2_reference.py
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import gpt2_torch  # noqa: E402
import safetensors_torch  # noqa: E402

CONFIG = gpt2_torch.GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=24, vocab_size=96, dropout=0.0, bias=True)
TRAINING = dict(steps=10, batch=4, seq_len=16, lr=3e-3, min_lr=3e-4, warmup_steps=3, weight_decay=0.1,
                beta1=0.9, beta2=0.95, eps=1e-8, grad_clip=1.2)
GENERATION = dict(prompt_length=5, new_tokens=22)  # 27 > block_size: the window slides


def train(weights, tokens, dtype):
    torch.manual_seed(0)
    model = gpt2_torch.GPT2LMHeadModel(CONFIG).to(dtype)
    model.load_state_dict({k: v.to(dtype) for k, v in weights.items()})
    t = TRAINING
    opt = torch.optim.AdamW(gpt2_torch.nanogpt_param_groups(model, t["weight_decay"]), lr=t["lr"],
                            betas=(t["beta1"], t["beta2"]), eps=t["eps"])
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: gpt2_torch.nanogpt_lr(step, t["lr"], t["min_lr"], t["warmup_steps"], t["steps"]) / t["lr"])
    out = {}
    losses, lrs, norms = [], [], []
    for step in range(t["steps"]):
        x, y = tokens[step, :, :-1], tokens[step, :, 1:]
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, CONFIG.vocab_size), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if step == 0:
            out["logits"] = logits.detach()
            for name, p in model.named_parameters():
                out["grad_norm." + name] = p.grad.norm().reshape(1)
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), t["grad_clip"]).item())
        lrs.append(opt.param_groups[0]["lr"])
        losses.append(loss.item())
        opt.step()
        schedule.step()
    out["loss"] = torch.tensor(losses, dtype=torch.float64)
    out["lr"] = torch.tensor(lrs, dtype=torch.float64)
    out["total_norm"] = torch.tensor(norms, dtype=torch.float64)
    for name, p in model.named_parameters():
        out["final." + name] = p.detach().clone()
    return out


def greedy(weights, tokens, dtype):
    model = gpt2_torch.GPT2LMHeadModel(CONFIG).to(dtype)
    model.load_state_dict({k: v.to(dtype) for k, v in weights.items()})
    model.eval()
    prompt = tokens[0, :, :GENERATION["prompt_length"]]
    return model.generate(prompt, GENERATION["new_tokens"], temperature=0)


def main():
    torch.manual_seed(20261201)
    model = gpt2_torch.GPT2LMHeadModel(CONFIG).double()
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    t = TRAINING
    # Rows that can be learned: progressions start + i * stride (mod V), stride 1 to 3.
    shape = (t["steps"], t["batch"], 1)
    start = torch.randint(0, CONFIG.vocab_size, shape, dtype=torch.int64)
    stride = torch.randint(1, 4, shape, dtype=torch.int64)
    tokens = (start + stride * torch.arange(t["seq_len"] + 1)) % CONFIG.vocab_size

    hub = gpt2_torch.hub_state_dict(model)
    metadata = {"config": json.dumps(CONFIG.__dict__), "training": json.dumps(TRAINING),
                "generation": json.dumps(GENERATION), "torch": torch.__version__}
    safetensors_torch.save(hub, os.path.join(HERE, "gpt2_tiny_hub.safetensors"), metadata={"format": "pt"})
    lm_head = {k: v.float() for k, v in model.state_dict().items()}  # lm_head.weight included (tied)
    safetensors_torch.save(lm_head, os.path.join(HERE, "gpt2_tiny_lm_head.safetensors"), metadata={"format": "pt"})

    reference = {"tokens": tokens}
    for dtype, tag in ((torch.float32, "f32"), (torch.float64, "f64")):
        for name, tensor in train(weights, tokens, dtype).items():
            reference[f"{tag}/{name}"] = tensor
        reference[f"{tag}/greedy"] = greedy(weights, tokens, dtype)
        print(tag, "losses", [round(x, 6) for x in reference[f"{tag}/loss"].tolist()])
        print(tag, "norms", [round(x, 4) for x in reference[f"{tag}/total_norm"].tolist()])
    if not torch.equal(reference["f32/greedy"], reference["f64/greedy"]):
        print("note: float32 and float64 greedy generations differ")
    safetensors_torch.save(reference, os.path.join(HERE, "gpt2_reference.safetensors"), metadata=metadata)


if __name__ == "__main__":
    main()
