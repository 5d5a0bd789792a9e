#!/usr/bin/python3
"""Writes tests/optim/data/optimizer_golden.safetensors from PyTorch's optimizers.

For each configuration in CONFIGS (tests/optim/test_optim_golden.cpp holds the same table)
and each dtype (float32, float64), the optimizer runs STEPS steps on the same three
parameters with a fixed sequence of gradients, and the file records the parameters and
the optimizer state after every step. Parameter 2 has no gradient at step 1, so it is
skipped there (and its Adam step count falls behind the others'). Parameter shapes are
chosen so PyTorch's kernels take both their scalar path (15 elements) and their vector
path plus a scalar tail (67 elements).

Keys (d = "f32" or "f64", s = step 0..STEPS-1, k = parameter index):
  inputs.<d>.param.<k>            initial parameter k
  inputs.<d>.grad.<s>.<k>         gradient of parameter k at step s (absent: no gradient)
  <config>.hyper.<name>           the configuration's hyper-parameters (0-d float64)
  <config>.<d>.step<s>.param.<k>  parameter k after step s
  <config>.<d>.step<s>.<state>.<k>  optimizer state after step s (PyTorch's names)
  <config>.<d>.lr                 learning rate after each scheduler step (StepLR only)

The reference was produced on an AVX2 machine (torch.__config__ reports "CPU capability
usage: AVX2"); PyTorch's float32 rounding of add(alpha=) and addcmul follows its
vectorised kernels there, which use fused multiply-adds.

Run with Debian's python3-torch 1.13: /usr/bin/python3 tests/optim/make_golden.py
"""

import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tools"))
import safetensors_torch  # noqa: E402

STEPS = 5
SHAPES = [(3, 5), (67,), (4,)]
SKIPPED = {(1, 2)}  # (step, parameter) pairs without a gradient

# name -> (optimizer class, keyword arguments, StepLR arguments or None)
CONFIGS = {
    "sgd": (torch.optim.SGD, dict(lr=0.1), None),
    "sgd_momentum": (torch.optim.SGD, dict(lr=0.1, momentum=0.9), None),
    "sgd_dampening": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.3), None),
    "sgd_nesterov": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True), None),
    "sgd_weight_decay": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01), None),
    "sgd_maximize": (torch.optim.SGD, dict(lr=0.05, momentum=0.5, weight_decay=0.1, maximize=True), None),
    "adam": (torch.optim.Adam, dict(lr=0.01), None),
    "adam_amsgrad": (torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.9), amsgrad=True), None),
    "adam_weight_decay": (torch.optim.Adam, dict(lr=0.01, weight_decay=0.1, eps=1e-6), None),
    "adamw": (torch.optim.AdamW, dict(lr=0.01), None),
    "adamw_amsgrad": (torch.optim.AdamW, dict(lr=0.02, weight_decay=0.5, amsgrad=True), None),
    "adadelta": (torch.optim.Adadelta, dict(), None),
    "adadelta_weight_decay": (torch.optim.Adadelta, dict(lr=0.5, rho=0.95, eps=1e-5, weight_decay=0.05), None),
    "steplr": (torch.optim.SGD, dict(lr=0.1, momentum=0.9), dict(step_size=2, gamma=0.5)),
}

DTYPES = {"f32": torch.float32, "f64": torch.float64}


def make_inputs():
    """Parameters and gradients, drawn in float64 and rounded for float32."""
    generator = torch.Generator().manual_seed(1234)
    params = [torch.randn(shape, generator=generator, dtype=torch.float64) for shape in SHAPES]
    grads = []
    for step in range(STEPS):
        scale = [1.0, 0.1, 3.0, 0.5, 1.5][step]  # varied sizes exercise amsgrad's maximum
        grads.append([None if (step, k) in SKIPPED else
                      scale * torch.randn(shape, generator=generator, dtype=torch.float64)
                      for k, shape in enumerate(SHAPES)])
    return params, grads


def hyper_tensors(name, kwargs, scheduler):
    out = {}
    for key, value in kwargs.items():
        if key == "betas":
            out[f"{name}.hyper.beta1"], out[f"{name}.hyper.beta2"] = value
        else:
            out[f"{name}.hyper.{key}"] = float(value)
    for key, value in (scheduler or {}).items():
        out[f"{name}.hyper.scheduler_{key}"] = float(value)
    return {key: torch.tensor(value, dtype=torch.float64) for key, value in out.items()}


def run(name, cls, kwargs, scheduler_args, dtype_name, params0, grads):
    dtype = DTYPES[dtype_name]
    params = [p.to(dtype).clone().requires_grad_() for p in params0]
    optimizer = cls(params, foreach=False, **kwargs)  # the single-tensor path Tessera mirrors
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, **scheduler_args) if scheduler_args else None
    out = {}
    lrs = []
    for step in range(STEPS):
        for k, p in enumerate(params):
            g = grads[step][k]
            p.grad = None if g is None else g.to(dtype).clone()
        optimizer.step()
        if scheduler:
            scheduler.step()
            lrs.append(scheduler.get_last_lr()[0])
        prefix = f"{name}.{dtype_name}.step{step}"
        for k, p in enumerate(params):
            out[f"{prefix}.param.{k}"] = p.detach().clone()
            for state_name, value in optimizer.state[p].items():
                if value is None:  # SGD without momentum keeps momentum_buffer = None
                    continue
                if state_name == "step":
                    value = torch.tensor(float(value), dtype=torch.float64)
                out[f"{prefix}.{state_name}.{k}"] = value.detach().clone()
    if scheduler:
        out[f"{name}.{dtype_name}.lr"] = torch.tensor(lrs, dtype=torch.float64)
    return out


def main():
    params, grads = make_inputs()
    tensors = {}
    for dtype_name, dtype in DTYPES.items():
        for k, p in enumerate(params):
            tensors[f"inputs.{dtype_name}.param.{k}"] = p.to(dtype)
        for step in range(STEPS):
            for k, g in enumerate(grads[step]):
                if g is not None:
                    tensors[f"inputs.{dtype_name}.grad.{step}.{k}"] = g.to(dtype)
    for name, (cls, kwargs, scheduler) in CONFIGS.items():
        tensors.update(hyper_tensors(name, kwargs, scheduler))
        for dtype_name in DTYPES:
            tensors.update(run(name, cls, kwargs, scheduler, dtype_name, params, grads))
    os.makedirs(os.path.join(here, "data"), exist_ok=True)
    path = os.path.join(here, "data", "optimizer_golden.safetensors")
    safetensors_torch.save(tensors, path, metadata={"torch": torch.__version__, "steps": str(STEPS),
                                                    "written_by": "tests/optim/make_golden.py"})
    print(f"wrote {path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
