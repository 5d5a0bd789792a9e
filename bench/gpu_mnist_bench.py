#!/usr/bin/env python3
"""Training throughput of PyTorch's MNIST example network on one GPU, eager mode: the
PyTorch side of bench/gpu_mnist_bench.cpp, with the same network, step and measurement.

    python3 bench/gpu_mnist_bench.py --batch-sizes 64,512 --steps 200

Each batch size: a fresh network (train mode, so dropout runs), SGD (lr 0.01), one fixed
batch of random images and labels already on the device, --warmup steps, then --steps
timed steps of zero_grad, forward, nll_loss, backward and step, with the device
synchronised before and after the timed loop and never inside it. TF32 is off unless
--tf32 (PyTorch enables it for cuDNN convolutions by default; Tessera does not), so both
sides compute float32 products in full float32. Prints one JSON object per batch size.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from torch_mnist_net import Net  # noqa: E402


def samples_per_second(args, batch_size, device):
    torch.manual_seed(1)
    model = Net().to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    images = torch.randn(batch_size, 1, 28, 28, device=device)
    labels = torch.randint(0, 10, (batch_size,), device=device)

    def step():
        optimizer.zero_grad()
        loss = F.nll_loss(model(images), labels)
        loss.backward()
        optimizer.step()

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(args.warmup):
        step()
    synchronize()
    started = time.perf_counter()
    for _ in range(args.steps):
        step()
    synchronize()
    return batch_size * args.steps / (time.perf_counter() - started)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", default="64,512")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--tf32", action="store_true")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_mnist_bench.py: no CUDA device", file=sys.stderr)
        return 77
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    for batch_size in [int(b) for b in args.batch_sizes.split(",")]:
        rate = samples_per_second(args, batch_size, device)
        print(json.dumps({"framework": "pytorch", "version": torch.__version__,
                          "device": name, "batch_size": batch_size,
                          "tf32": args.tf32, "steps": args.steps, "samples_per_s": round(rate, 1),
                          "ms_per_step": round(1000.0 * batch_size / rate, 4)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
