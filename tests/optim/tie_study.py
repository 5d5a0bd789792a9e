#!/usr/bin/python3
"""How each library's float32 forward treats the decisions of PyTorch's MNIST network: the
max-pool windows whose two largest values nearly tie and the ReLU inputs near zero, along
the float64 SGD trajectories of make_float32_accuracy_golden.py's windows (run 0; issue 25,
docs/performance.md "float32 accuracy"). Tessera's side is
TESSERA_TIE_STUDY=1 test_optim -tc='*near ties*', which prints the same table.

Per window, over the 36 steps, at the float64 parameters rounded to float32 and the step's
float32 batch:
  e       conv2's output error, float32 forward - float64 forward (conv1's error included)
  pool    the 2x2 max-pool windows of relu(conv2) with a positive largest value a1 and a
          second largest a2 < a1 (float64): rms of (e1 - e2) / a1 over all of them and over
          the near ties (a1 - a2 < 1e-6 a1), rms of e1 / a1 over the same, and the flips
          (float32's first largest is not float64's, exact ties left out)
  relu2   conv2's outputs whose float32 sign differs from float64's

    /usr/bin/python3 tests/optim/tie_study.py [--threads 2] [--windows 4]
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
from torch_mnist_net import Net  # noqa: E402
from make_float32_accuracy_golden import batch, make_model  # noqa: E402  (the golden's batches and model)

STEPS, LR, MOMENTUM = 36, 0.05, 0.9
NEAR = 1e-6  # a near tie: the two largest values of a window closer than this, relatively
DATA = os.path.join(here, "data")


def conv2_output(model, x):
    return model.conv2(F.relu(model.conv1(x)))


def windows_of(a):
    n, c, h, w = a.shape
    return a.reshape(n, c, h // 2, 2, w // 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(-1, 4)


class Tally:
    def __init__(self):
        self.sums = {"d_all": 0.0, "e_all": 0.0, "n_all": 0, "d_near": 0.0, "e_near": 0.0, "n_near": 0,
                     "flips": 0, "relu_flips": 0}

    def add(self, a32, a64):
        t = self.sums
        t["relu_flips"] += int(((a32 > 0) != (a64 > 0)).sum())
        w64 = windows_of(F.relu(a64))
        w32 = windows_of(F.relu(a32.double()))
        top2 = w64.topk(2, dim=-1)
        a1, a2 = top2.values[:, 0], top2.values[:, 1]
        i1, i2 = top2.indices[:, 0:1], top2.indices[:, 1:2]
        keep = (a1 > 0) & (a2 < a1)
        e1 = (w32.gather(-1, i1) - w64.gather(-1, i1)).squeeze(-1)
        e2 = (w32.gather(-1, i2) - w64.gather(-1, i2)).squeeze(-1)
        d, e = (e1 - e2) / a1, e1 / a1
        near = keep & (a1 - a2 < NEAR * a1) & (a1 - a2 > 1e-12 * a1)
        for mask, suffix in ((keep, "all"), (near, "near")):
            t["d_" + suffix] += float((d[mask] ** 2).sum())
            t["e_" + suffix] += float((e[mask] ** 2).sum())
            t["n_" + suffix] += int(mask.sum())
        choice32 = w32.argmax(dim=-1, keepdim=True)
        choice64 = w64.argmax(dim=-1, keepdim=True)
        at32, at64 = w64.gather(-1, choice32), w64.gather(-1, choice64)
        t["flips"] += int(((at32 - at64).abs() > 1e-12 * at64.abs()).sum())

    def line(self, label):
        t = self.sums
        rms = lambda key, n: (t[key] / max(t[n], 1)) ** 0.5  # noqa: E731
        return (f"{label:>8} {rms('d_all', 'n_all'):9.2e} {rms('e_all', 'n_all'):9.2e} {t['n_near']:6d} "
                f"{rms('d_near', 'n_near'):9.2e} {rms('e_near', 'n_near'):9.2e} {t['flips']:6d} {t['relu_flips']:6d}")


HEADER = "  window  d-rms-all e-rms-all   near d-rms-nr e-rms-nr  flips relu2"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--windows", type=int, default=4)
    args = parser.parse_args()
    if os.environ.get("TIE_LAUNCHED") != "1":  # start again as bench/ starts PyTorch
        env = torch_cpu.environment(threads=args.threads)
        env["TIE_LAUNCHED"] = "1"
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    torch.set_num_threads(args.threads)
    data = safetensors_torch.load(os.path.join(DATA, "sgd_drift_golden.safetensors"))
    orders = safetensors_torch.load(os.path.join(DATA, "float32_accuracy_golden.safetensors"))["window.order"]
    stored = safetensors_torch.load(os.path.join(DATA, "mnist_training_golden.safetensors"))
    weights = {name: stored[name].clone() for name, _ in Net().named_parameters()}
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads, ATen capability "
          f"{torch_cpu.report()['aten_capability']}, {torch_cpu.cpu_model()}")
    print(HEADER)
    total = Tally()
    for w in range(args.windows):
        images, labels = data["images"][orders[w]], data["labels"][orders[w]]
        model = make_model(weights, torch.float64)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, foreach=False)
        tally = Tally()
        for step in range(STEPS):
            probe = make_model(model.state_dict(), torch.float32)
            x32, y = batch(images, labels, step, torch.float32)
            with torch.no_grad():
                a32, a64 = conv2_output(probe, x32), conv2_output(model, x32.double())
            tally.add(a32, a64)
            total.add(a32, a64)
            optimizer.zero_grad()
            F.nll_loss(model(x32.double()), y).backward()
            optimizer.step()
        print(tally.line(str(w)), flush=True)
    print(total.line("all"))


if __name__ == "__main__":
    main()
