#!/usr/bin/python3
"""PyTorch's side of the GEMM benchmark (bench/gemm runs it beside bench/gemm_bench.cpp): the
products of bench/gemm_bench.cpp on the CPU, and one JSON line with each one's median time
and GFLOP/s (2 m n k flops). float32 rows run on the BLAS PyTorch loaded (OpenBLAS, from
bench/torch_cpu.py's environment); bfloat16 rows as a PyTorch user asks for speed,
under torch.autocast("cpu", dtype=torch.bfloat16) on float32 operands (the casts timed, as
the user gets them: autocast casts plain tensors on every call), and on operands already
bfloat16 (the product alone, what the casts feed: dtype "bfloat16-operands").

  /usr/bin/python3 bench/gemm_torch.py --shapes 2048x768x3072 --threads 2 [--reps 10]
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_cpu  # noqa: E402


def median_seconds(reps, product):
    product()
    seconds = []
    for _ in range(reps):
        start = time.perf_counter()
        product()
        seconds.append(time.perf_counter() - start)
    seconds.sort()
    return seconds[len(seconds) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="2048x768x3072,2048x768x768")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    rows = []
    with torch.no_grad():
        for shape in args.shapes.split(","):
            m, k, n = (int(v) for v in shape.split("x"))
            x, w, wt = torch.randn(m, k), torch.randn(k, n), torch.randn(n, k)
            xb, wb, wtb = x.bfloat16(), w.bfloat16(), wt.bfloat16()

            def autocast(product):
                def run():
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        product()
                return run

            cases = [
                ("matmul", "float32", lambda: x @ w), ("linear", "float32", lambda: F.linear(x, wt)),
                ("matmul", "bfloat16", autocast(lambda: x @ w)), ("linear", "bfloat16", autocast(lambda: F.linear(x, wt))),
                ("matmul", "bfloat16-operands", lambda: xb @ wb), ("linear", "bfloat16-operands", lambda: F.linear(xb, wtb)),
            ]
            for op, dtype, product in cases:
                seconds = median_seconds(args.reps, product)
                rows.append({"op": op, "dtype": dtype, "m": m, "k": k, "n": n, "ms": seconds * 1e3,
                             "gflops": 2 * m * n * k / seconds / 1e9})
    result = {"framework": "pytorch", "threads": args.threads, "rows": rows}
    result.update(torch_cpu.report())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
