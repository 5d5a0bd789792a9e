#!/usr/bin/python3
"""Writes tests/optim/data/sgd_drift_golden.safetensors: how far PyTorch's float32 training
is from its float64 training, for tests/optim/test_sgd_drift.cpp.

PyTorch's MNIST example network from PyTorch's own initialisation (torch.manual_seed(1),
the weights tests/optim/data/mnist_training_golden.safetensors holds, which this script
checks and the test reads), trained STEPS steps of SGD (lr 0.05, momentum 0.9) on real
MNIST batches of 64 (training images in a fixed shuffled order, as PyTorch's example's
DataLoader shuffles), without dropout (eval mode: PyTorch's float32 and float64 dropout
masks are not the same draws), in float64 from the float32 weights widened exactly.
Two measurements of float32 against it:
  - free running: a float32 run from the same weights; its loss against the float64 run's
    at every step. Training is chaotic at this learning rate, so this drift amplifies the
    roundings by a factor that depends on the trajectory (PyTorch's own float32 runs drift
    7.9e-5 at 2 threads, 3.5e-4 at 1 and 6.5e-2 at 1 with ATEN_CPU_CAPABILITY=avx512 on
    these batches; 4x-100x apart between 1 and 2 threads on other orders of the data),
    which makes it a figure to print, not to compare within 2x.
  - along the float64 trajectory: at every step, the float64 parameters rounded to
    float32, the float32 loss and gradients there against the float64 ones. The float32
    arithmetic is all that differs and nothing is amplified; the test compares the worst
    loss error and each gradient's median error over the steps (a rare max-pool window
    whose two values are closer than float32's rounding moves a gradient at one step,
    see test_sgd_drift.cpp).
The file holds:
  images              [STEPS * 64, 1, 28, 28] uint8, in training order (ToTensor and
                      Normalize((0.1307,), (0.3081,)) are applied in float32 by both sides,
                      as torchvision does)
  labels              [STEPS * 64] int64
  losses.f64          the float64 run's loss at each step
  losses.f32          the free-running float32 run's (float64, widened exactly)
  step.loss           [STEPS] relative error of the float32 loss at each float64 step
  step.grad.<param>   [STEPS] ||g32 - g64|| / ||g64|| of each parameter's gradient there
  fc1_weight_sum      the float64 sum of the initial fc1.weight, to detect a changed weights file

Run with Debian's python3-torch 1.13 from the repository root, with MNIST fetched
(scripts/get-mnist): /usr/bin/python3 tests/optim/make_drift_golden.py

--windows N measures the free-running drift on N windows of the data instead (window w:
batches 36w to 36w+35 of the same order, the same initial weights), writes no golden, and
prints per window the worst relative loss difference and the first step where it exceeds
1e-3. PyTorch runs as bench/torch_cpu.py starts it (Debian's OpenBLAS on its best kernels),
at --threads threads; ATEN_CPU_CAPABILITY picks ATen's kernels. --data FILE also writes the
windows' images and labels (the golden's layout, N x 36 batches) for Tessera's side: test_optim
-tc='*windows*' with TESSERA_DRIFT_WINDOWS=FILE.

--orders N writes tests/optim/data/sgd_drift_orders_golden.safetensors, the goldens of the
free-running test over N orders of the golden's 36 batches (order 0 as they are, order r
torch.randperm(36) seeded r) from the same initial weights (no MNIST files needed):
  orders              [N, 36] int64, the batches' order
  f64                 [N, 36] the float64 run's loss at each step (PyTorch's own ATen
                      choice at 2 threads; float64 differs between configurations by ~1e-13)
  f32.<aten>.<t>      [N, 36] the float32 run's, in each of ORDER_CONFIGURATIONS
                      (ATEN_CPU_CAPABILITY aten, t threads), each a draw of float32 roundings
It prints each configuration's drift per order (about 8 minutes on 2 cores for 16 orders).
"""

import argparse
import json
import subprocess

import gzip
import os
import struct
import sys

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..", "..")
sys.path.insert(0, os.path.join(root, "tools"))
import safetensors_torch  # noqa: E402
sys.path.insert(0, os.path.join(root, "bench"))
import torch_cpu  # noqa: E402
from torch_mnist_net import Net  # noqa: E402

SEED = 1
STEPS = 36
BATCH = 64
LR, MOMENTUM = 0.05, 0.9
WEIGHTS_FILE = os.path.join(here, "data", "mnist_training_golden.safetensors")


def read_idx(path, count):
    """The first `count` items of an IDX file (raw or .gz) as a uint8 tensor."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        magic = struct.unpack(">I", f.read(4))[0]
        dims = [struct.unpack(">I", f.read(4))[0] for _ in range(magic & 0xFF)]
        item = 1
        for d in dims[1:]:
            item *= d
        data = f.read(count * item)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(count, *dims[1:])


def find(name):
    for candidate in (name, name + ".gz"):
        path = os.path.join(root, "data", "mnist", candidate)
        if os.path.exists(path):
            return path
    sys.exit(f"{name} not found under data/mnist: run scripts/get-mnist")


def batches(images, labels):
    for step in range(STEPS):
        rows = slice(step * BATCH, (step + 1) * BATCH)
        yield (images[rows].float() / 255.0 - 0.1307) / 0.3081, labels[rows]


def make_model(weights, dtype):
    model = Net()
    model.load_state_dict(weights)
    model.to(dtype)
    model.eval()
    return model


def free_running(weights, images, labels, dtype):
    """The loss at each step of training in `dtype`."""
    model = make_model(weights, dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, foreach=False)
    losses = []
    for x, y in batches(images, labels):
        optimizer.zero_grad()
        loss = F.nll_loss(model(x.to(dtype)), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float64)


def along_trajectory(weights, images, labels):
    """Per step of the float64 run: the float32 loss's relative error and each gradient's
    normwise relative error at the float64 parameters rounded to float32."""
    model = make_model(weights, torch.float64)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, foreach=False)
    loss_errors, grad_errors = [], {name: [] for name, _ in model.named_parameters()}
    for x, y in batches(images, labels):
        probe = make_model({k: v.float() for k, v in model.state_dict().items()}, torch.float32)
        loss32 = F.nll_loss(probe(x), y)
        loss32.backward()
        optimizer.zero_grad()
        loss = F.nll_loss(model(x.double()), y)
        loss.backward()
        loss_errors.append(abs(loss32.item() - loss.item()) / abs(loss.item()))
        for (name, p64), p32 in zip(model.named_parameters(), probe.parameters()):
            grad_errors[name].append(((p32.grad.double() - p64.grad).norm() / p64.grad.norm()).item())
        optimizer.step()
    return torch.tensor(loss_errors, dtype=torch.float64), {
        name: torch.tensor(values, dtype=torch.float64) for name, values in grad_errors.items()}


def drift_by_step(f32, f64):
    """The worst relative loss difference over the steps, and the first step over 1e-3 (None: none)."""
    relative = ((f32 - f64).abs() / f64.abs()).tolist()
    first = next((step for step, value in enumerate(relative) if value > 1e-3), None)
    return max(relative), first


def measure_windows(args, weights, images, labels):
    """The free-running drift on each window of STEPS batches (see the file's top)."""
    if args.data:
        safetensors_torch.save({"images": images, "labels": labels}, args.data, metadata={
            "windows": str(args.windows), "steps": str(STEPS), "batch": str(BATCH),
            "written_by": "tests/optim/make_drift_golden.py --windows"})
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads, ATen capability "
          f"{torch_cpu.report()['aten_capability']}, {torch_cpu.cpu_model()}")
    size = STEPS * BATCH
    for window in range(args.windows):
        rows = slice(window * size, (window + 1) * size)
        f32 = free_running(weights, images[rows], labels[rows], torch.float32)
        f64 = free_running(weights, images[rows], labels[rows], torch.float64)
        drift, first = drift_by_step(f32, f64)
        print(f"window {window}: drift {drift:.3e} first step over 1e-3 {first}", flush=True)


# --orders: PyTorch's configurations (ATEN_CPU_CAPABILITY, threads), each a draw of its own
# float32 roundings; the first is the golden's (PyTorch's own choice on the project's Xeon).
ORDER_CONFIGURATIONS = [("avx2", 2), ("avx2", 1), ("default", 2), ("default", 1), ("avx512", 2), ("avx512", 1)]
ORDERS_FILE = os.path.join(here, "data", "sgd_drift_orders_golden.safetensors")


def batch_orders(count):
    """Order 0 is the golden's batches as they are; order r > 0 is torch.randperm(STEPS) seeded r."""
    return torch.stack([torch.arange(STEPS)] + [torch.randperm(STEPS, generator=torch.Generator().manual_seed(r))
                                                 for r in range(1, count)])


def orders_worker(args, weights):
    """In one configuration: the free-running losses on each order of the golden's batches
    (float64 too when --with-f64), as JSON on stdout."""
    data = safetensors_torch.load(os.path.join(here, "data", "sgd_drift_golden.safetensors"))
    result = {"aten_capability": torch_cpu.report()["aten_capability"], "threads": torch.get_num_threads(),
              "f32": [], "f64": []}
    for order in batch_orders(args.orders):
        rows = torch.cat([torch.arange(b * BATCH, (b + 1) * BATCH) for b in order.tolist()])
        images, labels = data["images"][rows], data["labels"][rows]
        result["f32"].append(free_running(weights, images, labels, torch.float32).tolist())
        if args.with_f64:
            result["f64"].append(free_running(weights, images, labels, torch.float64).tolist())
    print(json.dumps(result))


def write_orders_golden(args):
    """Runs orders_worker in each of ORDER_CONFIGURATIONS and writes ORDERS_FILE."""
    tensors = {"orders": batch_orders(args.orders)}
    lines = []
    for index, (capability, threads) in enumerate(ORDER_CONFIGURATIONS):
        env = torch_cpu.environment(threads=threads)
        env.update({"DRIFT_LAUNCHED": "1", "ATEN_CPU_CAPABILITY": capability})
        command = [sys.executable, sys.argv[0], "--orders", str(args.orders), "--orders-worker", "--threads", str(threads)]
        run = subprocess.run(command + (["--with-f64"] if index == 0 else []), env=env, check=True,
                             capture_output=True, text=True)
        result = json.loads(run.stdout)
        if index == 0:
            tensors["f64"] = torch.tensor(result["f64"], dtype=torch.float64)
        f32 = torch.tensor(result["f32"], dtype=torch.float64)
        tensors[f"f32.{capability}.{threads}"] = f32
        drifts = ((f32 - tensors["f64"]).abs() / tensors["f64"].abs()).max(dim=1).values
        lines.append(f"{result['aten_capability']:>7} {threads} threads: median {drifts.median().item():.2e}  " +
                     " ".join(f"{d:.1e}" for d in drifts.tolist()))
        print(lines[-1], flush=True)
    safetensors_torch.save(tensors, ORDERS_FILE, metadata={
        "torch": torch.__version__, "steps": str(STEPS), "batch": str(BATCH), "lr": str(LR), "momentum": str(MOMENTUM),
        "cpu": torch_cpu.cpu_model(), "configurations": " ".join(f"{c}:{t}" for c, t in ORDER_CONFIGURATIONS),
        "written_by": "tests/optim/make_drift_golden.py --orders"})
    print(f"wrote {ORDERS_FILE}: {os.path.getsize(ORDERS_FILE)} bytes")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--windows", type=int, default=0, help="measure the free-running drift on this many windows")
    parser.add_argument("--threads", type=int, default=2, help="PyTorch's threads with --windows")
    parser.add_argument("--data", help="with --windows: write the windows' images and labels here")
    parser.add_argument("--orders", type=int, default=0, help="write the golden of this many orders of the batches")
    parser.add_argument("--orders-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--with-f64", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.orders and not args.orders_worker:
        return write_orders_golden(args)
    if args.windows and os.environ.get("DRIFT_LAUNCHED") != "1":  # start again as bench/ starts PyTorch
        env = torch_cpu.environment(threads=args.threads)
        env["DRIFT_LAUNCHED"] = "1"
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    torch.set_num_threads(args.threads if args.windows or args.orders else 2)  # the golden: as the tests run (OMP_NUM_THREADS=2)
    torch.manual_seed(SEED)
    weights = {name: value.detach().clone() for name, value in Net().state_dict().items()}
    stored = safetensors_torch.load(WEIGHTS_FILE)
    if args.windows or args.orders:  # the test's weights (the seed's draws depend on ATEN_CPU_CAPABILITY)
        weights = {name: stored[name].clone() for name in weights}
    if args.orders:
        return orders_worker(args, weights)
    for name, value in weights.items():
        if not torch.equal(stored[name], value):
            sys.exit(f"{WEIGHTS_FILE}'s {name} is not torch.manual_seed({SEED})'s initialisation")
    count = 60000
    order = torch.randperm(count, generator=torch.Generator().manual_seed(SEED))[:STEPS * BATCH * max(1, args.windows)]
    images = read_idx(find("train-images-idx3-ubyte"), count).reshape(count, 1, 28, 28)[order].contiguous()
    labels = read_idx(find("train-labels-idx1-ubyte"), count).to(torch.int64)[order].contiguous()
    if args.windows:
        return measure_windows(args, weights, images, labels)
    f32 = free_running(weights, images, labels, torch.float32)
    f64 = free_running(weights, images, labels, torch.float64)
    step_loss, step_grads = along_trajectory(weights, images, labels)
    drift = ((f32 - f64).abs() / f64.abs()).max().item()
    print("f64", " ".join(f"{x:.7f}" for x in f64.tolist()))
    print(f"free running: float32 vs float64 max relative loss difference {drift:.3e}")
    print(f"along the float64 trajectory: loss {step_loss.max().item():.2e}; gradients " +
          ", ".join(f"{name} {values.max().item():.2e}" for name, values in step_grads.items()))
    tensors = {"images": images, "labels": labels, "losses.f64": f64, "losses.f32": f32, "step.loss": step_loss}
    tensors.update({f"step.grad.{name}": values for name, values in step_grads.items()})
    tensors["fc1_weight_sum"] = weights["fc1.weight"].double().sum().reshape(1)
    path = os.path.join(here, "data", "sgd_drift_golden.safetensors")
    safetensors_torch.save(tensors, path, metadata={
        "torch": torch.__version__, "steps": str(STEPS), "batch": str(BATCH), "lr": str(LR),
        "momentum": str(MOMENTUM), "order": f"torch.randperm(60000, seed {SEED})", "threads": str(torch.get_num_threads()),
        "written_by": "tests/optim/make_drift_golden.py"})
    print(f"wrote {path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
