#!/usr/bin/python3
"""Writes tests/io/data/pytorch_reference.safetensors from PyTorch.

The tensors are exact small values that tests/io/test_safetensors.cpp rebuilds on its own
side, so the test can check that Tessera reads PyTorch's bytes and that tessera::io::save
writes the very same bytes. Run with Debian's python3-torch: /usr/bin/python3 tests/io/make_reference.py
"""

import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tools"))
import safetensors_torch  # noqa: E402

tensors = {
    "weight": torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.5 - 1,
    "bias_f64": torch.tensor([0.1, -2.5, 3.0], dtype=torch.float64),
    "labels": torch.tensor([3, -1, 7, 0], dtype=torch.int64),
    "pixels": torch.tensor([[0, 127], [128, 255]], dtype=torch.uint8),
    "half_precision": torch.tensor([1.0, -2.0, 0.5, 3.140625], dtype=torch.bfloat16),
    "scalar": torch.tensor(2.5, dtype=torch.float32),
    "empty": torch.zeros(0, 3, dtype=torch.float32),
    # Written through a contiguous copy, as Tessera does for non-contiguous tensors.
    "transposed": torch.arange(6, dtype=torch.float32).reshape(2, 3).t(),
    "caf\u00e9.\"quoted\"\\name": torch.tensor([1.0], dtype=torch.float32),
}
metadata = {"format": "pt", "written_by": "tests/io/make_reference.py"}

path = os.path.join(here, "data", "pytorch_reference.safetensors")
safetensors_torch.save(tensors, path, metadata)

back = safetensors_torch.load(path)
assert list(back) == list(tensors)
for name, tensor in tensors.items():
    assert back[name].dtype == tensor.dtype and back[name].shape == tensor.shape, name
    assert torch.equal(back[name], tensor), name
assert safetensors_torch.load_metadata(path) == metadata
print(f"wrote {path} ({os.path.getsize(path)} bytes), torch {torch.__version__}")
