#!/usr/bin/python3
"""Writes tests/data/transforms_reference.txt: torchvision's ToTensor and Normalize outputs
for every byte value, as float32 bit patterns, for test_data.cpp to compare bit for bit.

Run with Debian's python3-torchvision: /usr/bin/python3 tests/data/make_transforms_reference.py
The images go through PIL and torchvision.transforms exactly as torchvision.datasets.MNIST
feeds them (Image.fromarray(..., mode="L") -> Compose([ToTensor(), Normalize(...)])).
"""
import pathlib

import numpy as np
import torch
import torchvision
from PIL import Image
from torchvision import transforms

OUT = pathlib.Path(__file__).with_name("transforms_reference.txt")

# Every byte value once, as a 16x16 grayscale image (row-major: pixel p holds byte p).
gray = np.arange(256, dtype=np.uint8).reshape(16, 16)
# A 3-channel image for the per-channel case: channel c holds every byte value too.
rgb = np.stack([gray, gray, gray], axis=-1)

CASES = [
    ("to_tensor", gray, None),
    ("mnist", gray, ((0.1307,), (0.3081,))),
    ("fashion_mnist", gray, ((0.2860,), (0.3530,))),
    ("half", gray, ((0.5,), (0.5,))),
    ("imagenet_rgb", rgb, ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))),
]



def main():
    lines = [
        "# torchvision ToTensor (+ Normalize) of every byte value, float32 bits in hex, row-major [C, 16, 16].",
        f"# Made by tests/data/make_transforms_reference.py with torch {torch.__version__}, "
        f"torchvision {torchvision.__version__}.",
    ]
    for name, array, normalize in CASES:
        steps = [transforms.ToTensor()]
        if normalize:
            steps.append(transforms.Normalize(*normalize))
        image = Image.fromarray(array, mode="L" if array.ndim == 2 else "RGB")
        out = transforms.Compose(steps)(image)
        assert out.dtype == torch.float32
        # The closed form the C++ side uses: one float32 rounding per step.
        expected = array.astype(np.float32) / np.float32(255)
        if array.ndim == 3:
            expected = expected.transpose(2, 0, 1)
        else:
            expected = expected[None]
        if normalize:
            mean = np.array(normalize[0], dtype=np.float32)[:, None, None]
            std = np.array(normalize[1], dtype=np.float32)[:, None, None]
            expected = (expected - mean) / std
        assert np.array_equal(out.numpy().view(np.uint32), expected.astype(np.float32).view(np.uint32)), name
        mean_text = " ".join(repr(m) for m in normalize[0]) if normalize else "-"
        std_text = " ".join(repr(s) for s in normalize[1]) if normalize else "-"
        lines.append(f"case {name} channels {out.shape[0]} mean {mean_text} std {std_text}")
        words = out.contiguous().view(torch.int32).flatten().tolist()
        words = [f"{w & 0xffffffff:08x}" for w in words]
        for start in range(0, len(words), 16):
            lines.append(" ".join(words[start:start + 16]))
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
