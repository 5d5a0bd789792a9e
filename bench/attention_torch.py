#!/usr/bin/python3
"""PyTorch's side of the attention benchmark (bench/attention runs it beside
bench/attention_bench.cpp): forward and backward of the math attention torch 1.13 offers
(softmax(q k^T * scale + causal mask) v, as PyTorch 2.x's math path computes it) on random
[B, H, T, D] float32 q, k, v, and one JSON line: the median step time, samples/s, the peak
RSS beyond the inputs, the attention GFLOP/s (12 B H T^2 D flops per step, halved when
causal) and the BLAS core OpenBLAS runs.

  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread OPENBLAS_CORETYPE=SKYLAKEX \\
    /usr/bin/python3 bench/attention_torch.py --threads 2 [--causal]
"""

import argparse
import ctypes
import json
import math
import os
import resource
import time

import torch


def current_rss_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def openblas_core():
    """The library PyTorch loaded and, for OpenBLAS, the kernels it chose (its core name)."""
    with open("/proc/self/maps") as maps:
        paths = [line.split()[-1] for line in maps if "blas" in line.lower() and "/" in line]
    for path in paths:
        if "openblas" in path:
            library = ctypes.CDLL(path)
            library.openblas_get_corename.restype = ctypes.c_char_p
            return f"{path} ({library.openblas_get_corename().decode()})"
    return paths[0] if paths else "unknown"


def attention(q, k, v, causal):
    scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.size(-1)))
    if causal:
        keep = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, -1) @ v


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--causal", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(1)
    shape = (args.batch, args.heads, args.seq, args.dim)
    q, k, v = (torch.randn(shape, generator=g).requires_grad_() for _ in range(3))
    grad_output = torch.randn(shape, generator=g)
    base_rss = current_rss_bytes()
    steps = []
    for step in range(args.warmup + args.steps):
        for t in (q, k, v):
            t.grad = None
        start = time.perf_counter()
        attention(q, k, v, args.causal).backward(grad_output)
        if step >= args.warmup:
            steps.append(time.perf_counter() - start)
    median = sorted(steps)[len(steps) // 2]
    flop = 12.0 * args.batch * args.heads * args.seq ** 2 * args.dim * (0.5 if args.causal else 1.0)
    print(json.dumps({"framework": "pytorch " + torch.__version__, "median_step_ms": median * 1e3,
                      "samples_per_s": args.batch / median, "gflops": flop / median / 1e9,
                      "extra_rss_bytes": max(0, peak_rss_bytes() - base_rss), "blas": openblas_core()}))


if __name__ == "__main__":
    main()
