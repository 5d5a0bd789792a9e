#!/usr/bin/python3
"""Why float32 SGD on MNIST drifts from float64 as far as it does: PyTorch's side of the study
in docs/performance.md ("Window 0: chaos, not a kernel"); Tessera's side is test_optim
-tc='*why window 0*' with TESSERA_DRIFT_STUDY=1. Both train on the 36 batches of
tests/optim/data/sgd_drift_golden.safetensors (window 0) from its initial weights, as
make_drift_golden.py does, and print:

  - per step along the float64 trajectory (the float64 parameters rounded to float32): the
    float32 forward's decisions that differ from the float64 forward's, counted: ReLU inputs
    on the other side of zero (relu1, relu2, relu3) and 2x2 max-pool windows whose largest
    element is another one (first largest on ties); and the largest normwise error of a
    parameter gradient (the one-step error: SGD moves each parameter by lr times it);
  - the free-running float32 run's worst relative loss difference from the float64 run, as
    is and with one weight moved by one float32 ulp (PERTURBED below): if a one-ulp change
    of one weight moves the drift as far as another library's kernels do, the drift measures
    which side of a kink a run's roundings fall on, not how accurate its arithmetic is.

    /usr/bin/python3 tests/optim/drift_study.py [--threads 2]

PyTorch runs as bench/torch_cpu.py starts it (Debian's OpenBLAS on its best kernels);
ATEN_CPU_CAPABILITY picks ATen's kernels.
"""

import argparse
import os
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

STEPS, BATCH, LR, MOMENTUM = 36, 64, 0.05, 0.9
GOLDEN = os.path.join(here, "data", "sgd_drift_golden.safetensors")
WEIGHTS_FILE = os.path.join(here, "data", "mnist_training_golden.safetensors")
# (parameter, flat index) moved by one ulp towards +infinity, one run each; Tessera's side
# uses the same list (test_sgd_drift.cpp).
PERTURBED = [("conv1.weight", 0), ("conv1.bias", 5), ("conv2.weight", 1000), ("conv2.bias", 7),
             ("fc1.weight", 123456), ("fc1.bias", 3), ("fc2.weight", 77), ("fc2.bias", 2)]


def batch(data, step, dtype):
    rows = slice(step * BATCH, (step + 1) * BATCH)
    return ((data["images"][rows].float() / 255.0 - 0.1307) / 0.3081).to(dtype), data["labels"][rows]


def make_model(weights, dtype):
    model = Net()
    model.load_state_dict({k: v.float() for k, v in weights.items()})
    model.to(dtype)
    model.eval()
    return model


def decisions(model, x):
    """The forward's pre-activations of the three ReLUs and the max-pool's choice per window."""
    a1 = model.conv1(x)
    a2 = model.conv2(F.relu(a1))
    r2 = F.relu(a2)
    n, c, h, w = r2.shape
    windows = r2.reshape(n, c, h // 2, 2, w // 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)
    pooled = windows.max(dim=-1).values
    a3 = model.fc1(torch.flatten(pooled, 1))
    return a1, a2, windows, a3


def pool_flips(windows32, windows64):
    """The 2x2 windows whose first largest element differs between float32 and float64 and is
    not an exact tie (four equal values on the images' background, ordered by their last
    bits: test_sgd_drift.cpp's pool_flips_between)."""
    choice32 = windows32.argmax(dim=-1, keepdim=True)  # (torch's argmax: the first largest)
    choice64 = windows64.argmax(dim=-1, keepdim=True)
    at32, at64 = windows64.gather(-1, choice32), windows64.gather(-1, choice64)
    return int(((at32 - at64).abs() > 1e-12 * at64.abs()).sum())


def free_running(weights, data, dtype):
    model = make_model(weights, dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, foreach=False)
    losses = []
    for step in range(STEPS):
        x, y = batch(data, step, dtype)
        optimizer.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float64)


def worst_drift(f32, f64):
    return ((f32 - f64).abs() / f64.abs()).max().item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if os.environ.get("DRIFT_LAUNCHED") != "1":  # start again as bench/ starts PyTorch
        env = torch_cpu.environment(threads=args.threads)
        env["DRIFT_LAUNCHED"] = "1"
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    torch.set_num_threads(args.threads)
    data = safetensors_torch.load(GOLDEN)
    stored = safetensors_torch.load(WEIGHTS_FILE)
    weights = {name: stored[name].clone() for name, _ in Net().named_parameters()}
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads, ATen capability "
          f"{torch_cpu.report()['aten_capability']}, {torch_cpu.cpu_model()}")

    model = make_model(weights, torch.float64)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, foreach=False)
    print("step  relu1 relu2  pool relu3  worst-grad-error")
    for step in range(STEPS):
        probe = make_model(model.state_dict(), torch.float32)
        x32, y = batch(data, step, torch.float32)
        with torch.no_grad():
            d32 = decisions(probe, x32)
            d64 = decisions(model, x32.double())
        flips = [int(((d32[0] > 0) != (d64[0] > 0)).sum()), int(((d32[1] > 0) != (d64[1] > 0)).sum()),
                 pool_flips(d32[2], d64[2]), int(((d32[3] > 0) != (d64[3] > 0)).sum())]
        F.nll_loss(probe(x32), y).backward()
        optimizer.zero_grad()
        F.nll_loss(model(x32.double()), y).backward()
        error = max(((p32.grad.double() - p64.grad).norm() / p64.grad.norm()).item()
                    for p32, p64 in zip(probe.parameters(), model.parameters()))
        optimizer.step()
        print(f"{step:4d} {flips[0]:6d} {flips[1]:5d} {flips[2]:5d} {flips[3]:5d}  {error:.2e}", flush=True)

    f64 = free_running(weights, data, torch.float64)
    print(f"free running, float32 as is: drift {worst_drift(free_running(weights, data, torch.float32), f64):.2e}")
    for name, index in PERTURBED:
        moved = {k: v.clone() for k, v in weights.items()}
        flat = moved[name].view(-1)
        flat[index] = torch.nextafter(flat[index], torch.tensor(float("inf")))
        print(f"  {name}[{index}] + 1 ulp: drift {worst_drift(free_running(moved, data, torch.float32), f64):.2e}",
              flush=True)


if __name__ == "__main__":
    main()
