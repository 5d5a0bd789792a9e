#!/usr/bin/python3
"""Writes tests/optim/data/mnist_training_golden.safetensors: PyTorch training PyTorch's
MNIST example network for 20 steps, for tests/optim/test_training_parity.cpp.

The network is the one in PyTorch's examples/mnist/main.py (and DESIGN.md), run without
dropout (eval mode). The file holds:
  conv1.weight ... fc2.bias   PyTorch's own initialisation (torch.manual_seed(SEED)),
                              float32 with PyTorch's state_dict names
  images.<b>, labels.<b>      BATCHES fixed batches of BATCH synthetic 28x28 images
                              (float32, already normalised) and int64 labels
  losses.<optimizer>.<d>      the loss of each of the STEPS steps (float64 values; for
                              d = "f32" the float32 loss, widened exactly)
for <optimizer> in sgd (SGD lr=0.01, momentum=0.9) and adam (Adam lr=1e-3), and d in f32
and f64. Step s trains on batch s % BATCHES. The float64 runs use the float32 weights and
images converted to float64 (the C++ test converts the same way), so the file stores the
weights once; fc1.weight alone is 9216 x 128 floats (4.7 MB), which is why the data are
kept small (BATCH x BATCHES images).

Run with Debian's python3-torch 1.13: /usr/bin/python3 tests/optim/make_training_golden.py
"""

import os
import sys

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tools"))
import safetensors_torch  # noqa: E402
from torch_mnist_net import Net  # noqa: E402

SEED = 1
BATCH = 16
BATCHES = 4
STEPS = 20
# The task is kept hard (most images drawn as another class than their label, strong
# noise) so the losses stay well above zero for all 20 steps: near zero, float32 rounding
# of the logits would swamp a relative comparison.
CONFUSION = 0.7  # probability that an image shows a random class instead of its label
NOISE = 1.0      # amplitude of the uniform pixel noise, against strokes of height 1
OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=False),
    "adam": lambda params: torch.optim.Adam(params, lr=1e-3, foreach=False),
}
DTYPES = {"f32": torch.float32, "f64": torch.float64}


def synthetic_batches():
    """MNIST-like images: per class, a bright bar at a class-dependent place and angle,
    with soft edges and noise, normalised with MNIST's mean and std."""
    generator = torch.Generator().manual_seed(SEED + 1)
    ys, xs = torch.meshgrid(torch.arange(28.0), torch.arange(28.0), indexing="ij")
    batches = []
    for _ in range(BATCHES):
        labels = torch.randint(0, 10, (BATCH,), generator=generator)
        images = torch.empty(BATCH, 1, 28, 28)
        for i, label in enumerate(labels.tolist()):
            if torch.rand((), generator=generator).item() < CONFUSION:
                label = int(torch.randint(0, 10, (), generator=generator))  # drawn as another class
            angle = label * 0.314 + 0.2 * torch.rand((), generator=generator).item()
            cy = 9.0 + label + 2.0 * torch.rand((), generator=generator).item()
            cx = 14.0 + 3.0 * (torch.rand((), generator=generator).item() - 0.5)
            distance = ((xs - cx) * torch.sin(torch.tensor(angle)) - (ys - cy) * torch.cos(torch.tensor(angle))).abs()
            stroke = torch.clamp(2.0 - distance, 0.0, 1.0)
            noise = NOISE * torch.rand(28, 28, generator=generator)
            images[i, 0] = torch.clamp(stroke + noise, 0.0, 1.0)
        images = (images - 0.1307) / 0.3081
        batches.append((images.float(), labels.to(torch.int64)))
    return batches


def train(weights, batches, optimizer_name, dtype):
    model = Net()
    model.load_state_dict(weights)
    model.to(dtype)
    model.eval()  # no dropout
    optimizer = OPTIMIZERS[optimizer_name](model.parameters())
    losses = []
    for step in range(STEPS):
        images, labels = batches[step % BATCHES]
        optimizer.zero_grad()
        loss = F.nll_loss(model(images.to(dtype)), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float64)


def main():
    torch.manual_seed(SEED)
    weights = {name: value.detach().clone() for name, value in Net().state_dict().items()}
    batches = synthetic_batches()
    tensors = dict(weights)
    for b, (images, labels) in enumerate(batches):
        tensors[f"images.{b}"] = images
        tensors[f"labels.{b}"] = labels
    for optimizer_name in OPTIMIZERS:
        for dtype_name, dtype in DTYPES.items():
            losses = train(weights, batches, optimizer_name, dtype)
            tensors[f"losses.{optimizer_name}.{dtype_name}"] = losses
            print(optimizer_name, dtype_name, " ".join(f"{x:.6f}" for x in losses.tolist()))
        f32, f64 = tensors[f"losses.{optimizer_name}.f32"], tensors[f"losses.{optimizer_name}.f64"]
        print(f"  {optimizer_name}: float32 vs float64 max relative difference "
              f"{((f32 - f64).abs() / f64.abs()).max().item():.2e}")
    os.makedirs(os.path.join(here, "data"), exist_ok=True)
    path = os.path.join(here, "data", "mnist_training_golden.safetensors")
    safetensors_torch.save(tensors, path, metadata={
        "torch": torch.__version__, "steps": str(STEPS), "batches": str(BATCHES),
        "written_by": "tests/optim/make_training_golden.py"})
    print(f"wrote {path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
