#!/usr/bin/python3
"""PyTorch's side of the GPT-2 training benchmark (bench/gpt2 runs it beside Tessera's
bench/gpt2_train.cpp): the same model (tools/gpt2_torch.py, Hugging Face's layout), loop
and optimizer on random tokens; one JSON line with the same fields.

bench/gpt2 starts it in torch_cpu.environment(threads): Debian's OpenBLAS on the best
kernels this CPU supports, every thread count set.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import gpt2_torch  # noqa: E402
import torch_cpu  # noqa: E402  (beside this script)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="gpt2")
    parser.add_argument("--n-layer", type=int, default=0)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)

    sizes = dict(gpt2_torch.PRESETS[args.preset])
    if args.n_layer:
        sizes["n_layer"] = args.n_layer
    config = gpt2_torch.GPTConfig(**sizes)
    model = gpt2_torch.GPT2LMHeadModel(config)
    model.train()
    opt = torch.optim.AdamW(gpt2_torch.nanogpt_param_groups(model, 0.1), lr=6e-4, betas=(0.9, 0.95))
    total = args.warmup + args.steps
    generator = torch.Generator().manual_seed(2)
    batches = [torch.randint(0, config.vocab_size, (args.batch, args.seq_len + 1), generator=generator)
               for _ in range(total)]

    steps, forward, backward, optimizer = [], [], [], []
    timed = 0.0
    for i in range(total):
        start = time.perf_counter()
        x, y = batches[i][:, :-1], batches[i][:, 1:]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, config.vocab_size), y.reshape(-1))
        forwarded = time.perf_counter()
        loss.backward()
        backwarded = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
        seconds = time.perf_counter() - start
        if i >= args.warmup:
            timed += seconds
            steps.append(seconds)
            forward.append((forwarded - start) * 1e3)
            backward.append((backwarded - forwarded) * 1e3)
            optimizer.append((time.perf_counter() - backwarded) * 1e3)

    result = {"framework": "pytorch", "batch": args.batch, "seq_len": args.seq_len, "threads": args.threads,
              "parameters": sum(p.numel() for p in model.parameters()),
              "tokens_per_s": args.steps * args.batch * args.seq_len / timed,
              "median_step_s": statistics.median(steps),
              "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if args.profile:
        result["profile_ms"] = {"forward": statistics.median(forward), "backward": statistics.median(backward),
                                "optimizer": statistics.median(optimizer)}
    result.update(torch_cpu.report())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
