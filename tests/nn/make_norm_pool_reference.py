#!/usr/bin/python3
"""Writes tests/nn/norm_pool_reference.safetensors: PyTorch's BatchNorm2d and AdaptiveAvgPool2d.

Cases (float32 and float64 each, tensors named "<dtype>/<case>/<what>"):
  bn_momentum:   BatchNorm2d(3) with weight/bias set, three training steps on inputs x0..x2
                 (running stats and num_batches_tracked after each), the output and the
                 gradients (input, weight, bias) for a fixed upstream gradient at step 0;
                 then eval on x0: output and gradients.
  bn_cumulative: BatchNorm2d(3, momentum=None), three training steps: running stats after each.
  bn_plain:      BatchNorm2d(3, affine=False, track_running_stats=False): output and input
                 gradient in train mode and in eval mode (batch statistics in both).
  pool_*:        AdaptiveAvgPool2d to (3, 2), (1, 1) and (4, 6) of a [2, 3, 7, 5] input
                 (overlapping bins, global pool, upsampling bins): output and input gradient.
Inputs come from torch.manual_seed(0) draws, computed in float64 and rounded for float32.

Run with Debian's python3-torch: /usr/bin/python3 tests/nn/make_norm_pool_reference.py
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import safetensors_torch  # noqa: E402

OUTPUT = os.path.join(HERE, "norm_pool_reference.safetensors")


def main():
    torch.manual_seed(0)
    base = {
        "x": [torch.randn(4, 3, 5, 6, dtype=torch.float64) * 2 + 0.5 for _ in range(3)],
        "grad": torch.randn(4, 3, 5, 6, dtype=torch.float64),
        "weight": torch.rand(3, dtype=torch.float64) + 0.5,
        "bias": torch.randn(3, dtype=torch.float64),
        "pool_x": torch.randn(2, 3, 7, 5, dtype=torch.float64),
    }
    out = {}
    for dtype, tag in ((torch.float32, "f32"), (torch.float64, "f64")):
        xs = [x.to(dtype) for x in base["x"]]
        grad = base["grad"].to(dtype)
        for i, x in enumerate(xs):
            out[f"{tag}/input/x{i}"] = x
        out[f"{tag}/input/grad"] = grad
        out[f"{tag}/input/weight"] = base["weight"].to(dtype)
        out[f"{tag}/input/bias"] = base["bias"].to(dtype)

        bn = torch.nn.BatchNorm2d(3).to(dtype)
        with torch.no_grad():
            bn.weight.copy_(base["weight"])
            bn.bias.copy_(base["bias"])
        for step, x in enumerate(xs):
            x = x.clone().requires_grad_(True)
            y = bn(x)
            if step == 0:
                y.backward(grad)
                out[f"{tag}/bn_momentum/train_output"] = y.detach()
                out[f"{tag}/bn_momentum/train_grad_input"] = x.grad
                out[f"{tag}/bn_momentum/train_grad_weight"] = bn.weight.grad.clone()
                out[f"{tag}/bn_momentum/train_grad_bias"] = bn.bias.grad.clone()
            out[f"{tag}/bn_momentum/running_mean{step}"] = bn.running_mean.clone()
            out[f"{tag}/bn_momentum/running_var{step}"] = bn.running_var.clone()
            out[f"{tag}/bn_momentum/num_batches_tracked{step}"] = bn.num_batches_tracked.clone()
        bn.eval()
        bn.weight.grad = None
        bn.bias.grad = None
        x = xs[0].clone().requires_grad_(True)
        y = bn(x)
        y.backward(grad)
        out[f"{tag}/bn_momentum/eval_output"] = y.detach()
        out[f"{tag}/bn_momentum/eval_grad_input"] = x.grad
        out[f"{tag}/bn_momentum/eval_grad_weight"] = bn.weight.grad.clone()
        out[f"{tag}/bn_momentum/eval_grad_bias"] = bn.bias.grad.clone()

        bn = torch.nn.BatchNorm2d(3, momentum=None).to(dtype)
        for step, x in enumerate(xs):
            bn(x)
            out[f"{tag}/bn_cumulative/running_mean{step}"] = bn.running_mean.clone()
            out[f"{tag}/bn_cumulative/running_var{step}"] = bn.running_var.clone()

        bn = torch.nn.BatchNorm2d(3, affine=False, track_running_stats=False).to(dtype)
        for mode in ("train", "eval"):
            bn.train(mode == "train")
            x = xs[1].clone().requires_grad_(True)
            y = bn(x)
            y.backward(grad)
            out[f"{tag}/bn_plain/{mode}_output"] = y.detach()
            out[f"{tag}/bn_plain/{mode}_grad_input"] = x.grad

        pool_x = base["pool_x"].to(dtype)
        out[f"{tag}/input/pool_x"] = pool_x
        for size in ((3, 2), (1, 1), (4, 6)):
            x = pool_x.clone().requires_grad_(True)
            y = torch.nn.AdaptiveAvgPool2d(size)(x)
            g = torch.arange(y.numel(), dtype=dtype).reshape(y.shape) / 10 - 1
            y.backward(g)
            name = f"pool_{size[0]}x{size[1]}"
            out[f"{tag}/{name}/output"] = y.detach()
            out[f"{tag}/{name}/grad_input"] = x.grad
    safetensors_torch.save(out, OUTPUT, metadata={"torch": torch.__version__})
    print(f"wrote {OUTPUT}: {len(out)} tensors, {os.path.getsize(OUTPUT)} bytes")


if __name__ == "__main__":
    main()
