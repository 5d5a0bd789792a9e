#!/usr/bin/python3
"""Writes tests/optim/data/float32_accuracy_golden.safetensors: how far PyTorch's float32 is
from float64 on PyTorch's MNIST network under SGD, per op and over training, on several
windows of the data and from one-ulp perturbations of the initial weights, for
tests/optim/test_float32_accuracy.cpp (which needs no PyTorch).

The setting is make_drift_golden.py's: PyTorch's MNIST example network from PyTorch's own
initial weights (tests/optim/data/mnist_training_golden.safetensors), SGD lr 0.05 momentum
0.9, batches of 64, dropout off, 36 steps. The data: WINDOWS windows of 36 batches drawn
from the 2304 MNIST training images of tests/optim/data/sgd_drift_golden.safetensors (no
MNIST files needed): window 0 is those batches as they are, window w > 0 the same images
reordered by torch.randperm(2304) seeded w. Each window is trained RUNS times: run 0 from
the initial weights as they are, run r > 0 from them with every weight moved by one
float32 ulp, up or down as perturbation_directions(r) says, so that every rounding of the
run is drawn anew: a window whose drift is chaos shows a spread over its runs, an error of
the arithmetic a stable ratio.

The file holds:
  window.order           [WINDOWS, 2304] int64: window w's images, by index into the drift
                         golden's, in training order
  drift.f64, drift.f32   [WINDOWS, RUNS, 36] the loss at each step of the free-running
                         float64 and float32 runs (float64)
  op.<result>.max        [WINDOWS, 12] along run 0's float64 trajectory, at every third
                         step (OP_STEPS):
  op.<result>.rms        each op's float32 result on that step's float64 inputs rounded
                         to float32, against float64 on the same inputs (bench/accuracy's
                         measures: max |y - ref| / max |ref| and ||y - ref|| / ||ref||);
                         <result> as bench/mnist_ops_torch.py names them (conv1.y,
                         conv1.dweight, ..., net.loss, net.dconv1.weight, ...) and
                         sgd.<param>.param / sgd.<param>.buffer, the SGD-momentum update
                         from that step's parameters, gradients and momentum buffers
PyTorch runs as bench/torch_cpu.py starts it (Debian's OpenBLAS on its best kernels; ATen's
own choice of kernels) at 2 threads, as the tests run (--threads; the file's metadata says).

    /usr/bin/python3 tests/optim/make_float32_accuracy_golden.py     # about 15 minutes on 2 quiet cores
    # or the windows side by side, then the file:
    for w in 0 1 2 3; do /usr/bin/python3 tests/optim/make_float32_accuracy_golden.py --window $w & done; wait
    /usr/bin/python3 tests/optim/make_float32_accuracy_golden.py --merge
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..", "..")
sys.path.insert(0, os.path.join(root, "tools"))
sys.path.insert(0, os.path.join(root, "bench"))
import safetensors_torch  # noqa: E402
import torch_cpu  # noqa: E402
from mnist_ops_torch import compute_torch, errors, op_inputs, sgd_update  # noqa: E402
from torch_mnist_net import Net  # noqa: E402

WINDOWS, RUNS, STEPS, BATCH = 4, 7, 36, 64
OP_STEPS = range(0, STEPS, 3)  # the steps of the per-op table
LR, MOMENTUM = 0.05, 0.9
THREADS = 2  # PyTorch's threads, as the tests run (--threads)
DRIFT_FILE = os.path.join(here, "data", "sgd_drift_golden.safetensors")
WEIGHTS_FILE = os.path.join(here, "data", "mnist_training_golden.safetensors")
OUT_FILE = os.path.join(here, "data", "float32_accuracy_golden.safetensors")


def window_order(w, count):
    """Which of the images window w trains on, in training order."""
    if w == 0:
        return torch.arange(count)
    return torch.randperm(count, generator=torch.Generator().manual_seed(w))


def perturbation_directions(run, count, first_index):
    """Whether each of `count` weights, the first at index first_index of all the network's
    weights in registration order, moves up (True) or down by one ulp in run `run`: bit 20 of
    (index * 2654435761 + run * 0x5bd1e995) mod 2^32 (test_float32_accuracy.cpp's rule)."""
    index = torch.arange(first_index, first_index + count, dtype=torch.int64)
    return ((((index * 2654435761 + run * 0x5BD1E995) % (1 << 32)) >> 20) & 1) == 1


def perturbed(weights, run):
    """The float32 weights of run `run` (as they are for run 0)."""
    if run == 0:
        return {name: value.clone() for name, value in weights.items()}
    moved, first = {}, 0
    for name, value in weights.items():
        flat = value.reshape(-1)
        up = perturbation_directions(run, flat.numel(), first)
        first += flat.numel()
        moved[name] = torch.where(up, torch.nextafter(flat, torch.tensor(float("inf"))),
                                  torch.nextafter(flat, torch.tensor(float("-inf")))).reshape(value.shape)
    return moved


def batch(images, labels, step, dtype):
    rows = slice(step * BATCH, (step + 1) * BATCH)
    return ((images[rows].float() / 255.0 - 0.1307) / 0.3081).to(dtype), labels[rows]


def make_model(weights, dtype):
    model = Net()
    model.load_state_dict({name: value.float() for name, value in weights.items()})
    model.to(dtype).eval()
    return model


def free_running(weights, images, labels, dtype):
    model = make_model(weights, dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, foreach=False)
    losses = []
    for step in range(STEPS):
        x, y = batch(images, labels, step, dtype)
        optimizer.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def per_op_errors(weights, images, labels):
    """{result: ([max per step], [rms per step])} along the float64 trajectory."""
    model = make_model(weights, torch.float64)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, foreach=False)
    table = {}

    def record(key, value, reference):
        e = errors(value, reference)
        entry = table.setdefault(key, ([], []))
        entry[0].append(e["max"])
        entry[1].append(e["rms"])

    for step in range(STEPS):
        x, y = batch(images, labels, step, torch.float64)
        if step in OP_STEPS:
            tensors = op_inputs(model, x, y)
            reference, ours = compute_torch(tensors, torch.float64), compute_torch(tensors, torch.float32)
            for key in reference:
                record(key, ours[key], reference[key])
        optimizer.zero_grad()
        F.nll_loss(model(x), y).backward()
        if step not in OP_STEPS:
            optimizer.step()
            continue
        # The update from this step's parameters, gradients and buffers rounded to float32.
        named = dict(model.named_parameters())
        params = {name: p.detach().float() for name, p in named.items()}
        grads = {name: p.grad.float() for name, p in named.items()}
        buffers = None if step == 0 else {name: optimizer.state[p]["momentum_buffer"].float() for name, p in named.items()}
        p32, b32 = sgd_update(params, grads, buffers, torch.float32, LR, MOMENTUM)
        p64, b64 = sgd_update(params, grads, buffers, torch.float64, LR, MOMENTUM)
        for name in named:
            record(f"sgd.{name}.param", p32[name], p64[name])
            record(f"sgd.{name}.buffer", b32[name], b64[name])
        optimizer.step()
    return table


def measure_window(w, data, weights):
    """Window w's tensors: its order, free-running losses and per-op errors."""
    order = window_order(w, data["images"].shape[0])
    images, labels = data["images"][order].contiguous(), data["labels"][order].contiguous()
    f64 = torch.zeros(RUNS, STEPS, dtype=torch.float64)
    f32 = torch.zeros_like(f64)
    for run in range(RUNS):
        start = perturbed(weights, run)
        f64[run] = torch.tensor(free_running(start, images, labels, torch.float64), dtype=torch.float64)
        f32[run] = torch.tensor(free_running(start, images, labels, torch.float32), dtype=torch.float64)
    drifts = ((f32 - f64).abs() / f64.abs()).max(dim=1).values
    print(f"window {w}: drift median {drifts.median().item():.2e}, runs " +
          " ".join(f"{d:.1e}" for d in drifts.tolist()), flush=True)
    tensors = {"window.order": order, "drift.f64": f64, "drift.f32": f32}
    for key, (maxima, norms) in per_op_errors(weights, images, labels).items():
        tensors[f"op.{key}.max"] = torch.tensor(maxima, dtype=torch.float64)
        tensors[f"op.{key}.rms"] = torch.tensor(norms, dtype=torch.float64)
    return tensors


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--window", type=int, help="measure this window alone into OUT_FILE.part<w> (to run the "
                        "windows side by side; --merge then writes the golden)")
    parser.add_argument("--merge", action="store_true", help="write the golden from the WINDOWS parts")
    parser.add_argument("--threads", type=int, default=THREADS, help=f"PyTorch's threads [{THREADS}]")
    args = parser.parse_args()
    if os.environ.get("GOLDEN_LAUNCHED") != "1":  # start again as bench/ starts PyTorch
        env = torch_cpu.environment(threads=args.threads)
        env["GOLDEN_LAUNCHED"] = "1"
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    torch.set_num_threads(args.threads)
    data = safetensors_torch.load(DRIFT_FILE)
    stored = safetensors_torch.load(WEIGHTS_FILE)
    weights = {name: stored[name].clone() for name, _ in Net().named_parameters()}
    if args.window is not None:
        safetensors_torch.save(measure_window(args.window, data, weights), f"{OUT_FILE}.part{args.window}")
        return
    if args.merge:
        parts = [safetensors_torch.load(f"{OUT_FILE}.part{w}") for w in range(WINDOWS)]
    else:
        parts = [measure_window(w, data, weights) for w in range(WINDOWS)]
    tensors = {key: torch.stack([part[key] for part in parts]) for key in parts[0]}
    report = torch_cpu.report()
    safetensors_torch.save(tensors, OUT_FILE, metadata={
        "torch": torch.__version__, "threads": str(args.threads), "aten_capability": report["aten_capability"],
        "cpu": torch_cpu.cpu_model(), "windows": str(WINDOWS), "runs": str(RUNS), "steps": str(STEPS),
        "op_steps": " ".join(str(step) for step in OP_STEPS), "written_by": "tests/optim/make_float32_accuracy_golden.py"})
    print(f"wrote {OUT_FILE}: {os.path.getsize(OUT_FILE)} bytes")
    if args.merge:
        for w in range(WINDOWS):
            os.remove(f"{OUT_FILE}.part{w}")


if __name__ == "__main__":
    main()
