#!/usr/bin/python3
"""PyTorch's side of bench/checkpoint_async: how long a synchronous torch.save of the same
state blocks training (PyTorch 1.13 on this machine has no dcp.async_save, which arrived in
2.3). The state is GPT-2's (124M, or --n-layer layers of it) parameters with AdamW's two
moments, float32, as a model and optimizer state_dict; each save is written to a file,
flushed and fsynced, as Tessera's saves are. Prints one JSON line: the median over --saves.

  /usr/bin/python3 bench/checkpoint_torch.py --n-layer 12 --saves 3 --dir /tmp/ckpt-bench
"""

import argparse
import json
import os
import statistics
import time

import torch


def gpt2_shapes(n_layer, n_embd=768, vocab=50257, block=1024):
    shapes = {"transformer.wte.weight": (vocab, n_embd), "transformer.wpe.weight": (block, n_embd)}
    for i in range(n_layer):
        p = f"transformer.h.{i}."
        shapes.update({p + "ln_1.weight": (n_embd,), p + "ln_1.bias": (n_embd,),
                       p + "attn.c_attn.weight": (n_embd, 3 * n_embd), p + "attn.c_attn.bias": (3 * n_embd,),
                       p + "attn.c_proj.weight": (n_embd, n_embd), p + "attn.c_proj.bias": (n_embd,),
                       p + "ln_2.weight": (n_embd,), p + "ln_2.bias": (n_embd,),
                       p + "mlp.c_fc.weight": (n_embd, 4 * n_embd), p + "mlp.c_fc.bias": (4 * n_embd,),
                       p + "mlp.c_proj.weight": (4 * n_embd, n_embd), p + "mlp.c_proj.bias": (n_embd,)})
    shapes.update({"transformer.ln_f.weight": (n_embd,), "transformer.ln_f.bias": (n_embd,)})
    return shapes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n-layer", type=int, default=12)
    parser.add_argument("--saves", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dir", default="/tmp/tessera-checkpoint-bench")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params = [torch.nn.Parameter(torch.randn(shape)) for shape in gpt2_shapes(args.n_layer).values()]
    optimizer = torch.optim.AdamW(params, lr=6e-4)
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer.step()  # the moments exist
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, "torch.pt")
    times = []
    for _ in range(args.saves):
        start = time.perf_counter()
        with open(path, "wb") as f:
            torch.save({"model": {str(i): p for i, p in enumerate(params)}, "optimizer": optimizer.state_dict()}, f)
            f.flush()
            os.fsync(f.fileno())
        times.append(time.perf_counter() - start)
    size = os.path.getsize(path)
    os.remove(path)
    print(json.dumps({"framework": "pytorch", "torch": torch.__version__, "n_layer": args.n_layer,
                      "parameters": sum(p.numel() for p in params), "bytes": size,
                      "torch_save_ms": round(1000 * statistics.median(times), 1)}))


if __name__ == "__main__":
    main()
