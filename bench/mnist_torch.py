#!/usr/bin/python3
"""PyTorch's side of the MNIST training benchmark (bench/run runs it beside Tessera's).

Trains PyTorch's examples/mnist network exactly as that example's loop does (zero_grad,
forward, nll_loss, backward, step) with SGD on random data, in train mode (dropout on),
and prints one JSON object: samples/s (and the batch over the median step time), peak
memory, the fp32 GEMM rate of this process's
BLAS at the same thread count (the roofline), and optionally a per-layer profile.

bench/run starts it with Debian's python3-torch in torch_cpu.environment(threads): OpenBLAS
first on LD_LIBRARY_PATH, on the best kernels this CPU supports (torch_cpu.py), e.g.
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread OPENBLAS_CORETYPE=SKYLAKEX \
    /usr/bin/python3 bench/mnist_torch.py --batch 64 --threads 2
"""

import argparse
import json
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from torch_mnist_net import Net  # noqa: E402

import torch_cpu  # noqa: E402  (beside this script)


def current_rss_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def gemm_gflops(size, seconds):
    """fp32 GEMM rate of torch.mm (the BLAS PyTorch calls) at the current thread count."""
    a = torch.randn(size, size)
    b = torch.randn(size, size)
    c = torch.empty(size, size)
    torch.mm(a, b, out=c)
    best = 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        torch.mm(a, b, out=c)
        best = max(best, 2.0 * size ** 3 / (time.perf_counter() - start) / 1e9)
    return best


def profile_layers(model, optimizer, batches, steps):
    """Per-layer forward/backward times (ms per step, the median over the steps): the forward
    timed layer by layer by hand (the same ops as Net.forward), the backward from
    torch.autograd.profiler."""
    from torch.autograd import profiler

    rows = {}  # this step's ms per row
    history = {}  # every step's

    def add(name, ms):
        rows[name] = rows.get(name, 0.0) + ms

    # Forward: time each layer by wrapping the network's steps by hand (same ops as forward()).
    def timed_forward(x):
        def run(name, fn, *args):
            start = time.perf_counter()
            out = fn(*args)
            add(name + " fwd", (time.perf_counter() - start) * 1e3)
            return out
        x = run("conv1+relu", lambda t: F.relu(model.conv1(t)), x)
        x = run("conv2+relu", lambda t: F.relu(model.conv2(t)), x)
        x = run("pool", lambda t: F.max_pool2d(t, 2), x)
        x = run("dropout1", model.dropout1, x)
        x = torch.flatten(x, 1)
        x = run("fc1+relu", lambda t: F.relu(model.fc1(t)), x)
        x = run("dropout2", model.dropout2, x)
        x = run("fc2+log_softmax", lambda t: F.log_softmax(model.fc2(t), dim=1), x)
        return x

    # Backward: the autograd profiler names each node (torch 1.13's names); nodes that occur
    # more than once are told apart by their order, which is the reverse of the forward's.
    by_order = {
        "AddmmBackward0": ["fc2+log_softmax", "fc1+relu"],
        "MulBackward0": ["dropout2", "dropout1"],  # dropout on CPU is input * (bernoulli mask / (1 - p))
        "ReluBackward0": ["fc1+relu", "conv2+relu", "conv1+relu"],
        "ConvolutionBackward0": ["conv2+relu", "conv1+relu"],
    }
    by_name = {
        "MaxPool2DWithIndicesBackward0": "pool",
        "LogSoftmaxBackward0": "fc2+log_softmax",
        "NllLossBackward0": "loss",
        "torch::autograd::AccumulateGrad": "accumulate grad",
    }
    for step in range(steps):
        data, target = batches[step % len(batches)]
        optimizer.zero_grad()
        output = timed_forward(data)
        start = time.perf_counter()
        loss = F.nll_loss(output, target)
        add("loss fwd", (time.perf_counter() - start) * 1e3)
        with profiler.profile() as prof:
            loss.backward()
        seen = {name: 0 for name in by_order}
        events = [e for e in prof.function_events if e.cpu_parent is None]  # top-level: one per node
        for e in sorted(events, key=lambda e: e.time_range.start):
            name = e.name.replace("autograd::engine::evaluate_function: ", "")
            if name in by_order:
                row = by_order[name][min(seen[name], len(by_order[name]) - 1)]
                seen[name] += 1
            else:
                row = by_name.get(name, "other")  # views, transposes, ones_like
            add(row + " bwd", e.cpu_time_total / 1e3)
        start = time.perf_counter()
        optimizer.step()
        add("optimizer step", (time.perf_counter() - start) * 1e3)
        for name, ms in rows.items():
            history.setdefault(name, []).append(ms)
        rows.clear()
    return {name: sorted(ms)[len(ms) // 2] for name, ms in history.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40, help="timed training steps")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--gemm-seconds", type=float, default=1.0, help="0: skip the GEMM roofline")
    parser.add_argument("--profile", action="store_true", help="also print per-layer times")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = Net()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=args.momentum)
    # A few fixed random batches, made before timing (the data pipeline is not measured).
    batches = [(torch.randn(args.batch, 1, 28, 28), torch.randint(0, 10, (args.batch,))) for _ in range(4)]

    def step(data, target):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        return loss

    base_rss = current_rss_bytes()
    for i in range(args.warmup):
        step(*batches[i % len(batches)])
    step_seconds = []
    start = time.perf_counter()
    for i in range(args.steps):
        step_start = time.perf_counter()
        loss = step(*batches[i % len(batches)])
        step_seconds.append(time.perf_counter() - step_start)
    seconds = time.perf_counter() - start
    median_step = sorted(step_seconds)[len(step_seconds) // 2]
    result = {
        "framework": "pytorch",
        "batch": args.batch,
        "threads": args.threads,
        "steps": args.steps,
        "samples_per_s": args.steps * args.batch / seconds,
        "samples_per_s_median_step": args.batch / median_step,
        "median_step_ms": median_step * 1e3,
        "loss": float(loss),
        "peak_rss_bytes": peak_rss_bytes(),
        "training_rss_bytes": max(0, peak_rss_bytes() - base_rss),
    }
    result.update(torch_cpu.report())
    if args.gemm_seconds > 0:
        result["gemm_gflops"] = gemm_gflops(2048, args.gemm_seconds)
    if args.profile:
        result["layers_ms"] = profile_layers(model, optimizer, batches, 21)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
