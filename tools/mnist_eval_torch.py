#!/usr/bin/python3
"""Evaluates weights saved by `examples/mnist --save FILE` in PyTorch, on the real MNIST
test set, with PyTorch's own MNIST example network (the same names and shapes).

    /usr/bin/python3 tools/mnist_eval_torch.py mnist.safetensors [--data data/mnist]

Prints the test loss and accuracy as PyTorch's example does; they match what Tessera
printed for the same weights.
"""
import argparse
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_torch  # noqa: E402
from torch_mnist_net import Net  # noqa: E402


def read_idx(path):
    with open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(shape)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("weights")
    parser.add_argument("--data", default="data/mnist")
    args = parser.parse_args()

    model = Net()
    model.load_state_dict(safetensors_torch.load(args.weights))
    model.eval()
    images = read_idx(os.path.join(args.data, "t10k-images-idx3-ubyte"))
    labels = read_idx(os.path.join(args.data, "t10k-labels-idx1-ubyte")).long()
    # torchvision's ToTensor + Normalize((0.1307,), (0.3081,)), in float32.
    x = images.float().div(255).sub(0.1307).div(0.3081).unsqueeze(1)
    loss, correct = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(labels), 1000):
            output = model(x[start:start + 1000])
            target = labels[start:start + 1000]
            loss += F.nll_loss(output, target, reduction="sum").item()
            correct += (output.argmax(dim=1) == target).sum().item()
    print(f"PyTorch {torch.__version__}: Average loss: {loss / len(labels):.4f}, "
          f"Accuracy: {correct}/{len(labels)} ({100.0 * correct / len(labels):.2f}%)")


if __name__ == "__main__":
    main()
