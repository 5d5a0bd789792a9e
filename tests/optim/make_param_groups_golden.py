#!/usr/bin/python3
"""Writes tests/optim/data/param_groups_golden.safetensors: parameter groups and learning-rate
schedulers, from PyTorch 1.13.

Optimizers. Five parameters named as in the C++ tests' model (tests/optim/param_groups_model.h):
a root parameter "scale" and two children "a" and "b" with a weight and a bias each, in
named_parameters() order. nanoGPT's split puts the 2-D weights in group 0 ("decay") and the
rest in group 1 ("no_decay"); under FSDP each child is one unit, so every unit's flat shard
mixes both groups. Each configuration in OPTIMIZERS (tests/optim/test_param_groups_golden.cpp
holds the same table) runs STEPS steps on the same gradients, in float32 and float64, and
the file records the parameters and the optimizer state after every step, and the final
state_dict's param_groups. One configuration adds its second group after two steps
(add_param_group); some run a learning-rate schedule after each optimizer step.

Schedulers. Each configuration in SCHEDULERS runs SCHEDULE_STEPS steps over an SGD with two
groups (lr 0.1 and 0.05); the file records every group's get_last_lr() after construction
and after each step, and the final state_dict (its lists as float64 vectors, its integers
as int64; the key names in the file's metadata).

Keys (d = "f32" or "f64", s = step, n = parameter name, g = group):
  inputs.<d>.param.<n>                 initial parameter
  inputs.<d>.grad.<s>.<n>              gradient at step s
  <config>.<d>.step<s>.param.<n>       parameter after step s
  <config>.<d>.step<s>.<state>.<n>     optimizer state after step s (PyTorch's names)
  <config>.<d>.lr                      [STEPS, groups] each group's lr after each step (scheduled ones)
  <config>.<d>.param_groups.<g>.<key>  the final state_dict's param_groups (bools as 0/1, betas a pair)
  sched.<name>.lr                      [SCHEDULE_STEPS + 1, 2] get_last_lr() from construction on
  sched.<name>.state.<key>             the final state_dict's values
  metadata "sched.<name>.state_keys"   its keys, comma-separated, in PyTorch's order

Run with Debian's python3-torch 1.13: /usr/bin/python3 tests/optim/make_param_groups_golden.py
"""

import math
import os
import sys

import torch
from torch.optim import lr_scheduler

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tools"))
import safetensors_torch  # noqa: E402

STEPS = 6
SCHEDULE_STEPS = 40
# named_parameters() order of the C++ model; 67 elements take PyTorch's vector path and a tail.
PARAMS = [("scale", (3,)), ("a.weight", (3, 5)), ("a.bias", (67,)), ("b.weight", (6, 7)), ("b.bias", (6,))]
DECAY = ["a.weight", "b.weight"]
NO_DECAY = ["scale", "a.bias", "b.bias"]

# name -> (class, [(group's params, group's options)], defaults, schedule, added)
#   schedule: None or a function(optimizer) -> scheduler, stepped after each optimizer step
#   added: None or (step, params, options): add_param_group before that step
OPTIMIZERS = {
    "adamw_nanogpt": (torch.optim.AdamW, [(DECAY, dict(weight_decay=0.1)), (NO_DECAY, dict(weight_decay=0.0))],
                      dict(lr=0.01, betas=(0.9, 0.95)), None, None),
    "adam_groups": (torch.optim.Adam, [(DECAY, dict(weight_decay=0.05, amsgrad=True)), (NO_DECAY, dict(lr=0.02))],
                    dict(lr=0.01), None, None),
    "sgd_groups": (torch.optim.SGD, [(DECAY, dict(momentum=0.9, weight_decay=0.01, nesterov=True)),
                                     (NO_DECAY, dict(lr=0.05, momentum=0.0))],
                   dict(lr=0.1), None, None),
    "sgd_dampening_groups": (torch.optim.SGD, [(DECAY, dict(dampening=0.3)),
                                               (NO_DECAY, dict(maximize=True, weight_decay=0.1))],
                             dict(lr=0.1, momentum=0.5), None, None),
    "adadelta_groups": (torch.optim.Adadelta, [(DECAY, dict(rho=0.95, weight_decay=0.05)),
                                               (NO_DECAY, dict(lr=0.5, eps=1e-5))],
                        dict(lr=1.0), None, None),
    "adamw_add_group": (torch.optim.AdamW, [(DECAY, dict())], dict(lr=0.01, weight_decay=0.1), None,
                        (2, NO_DECAY, dict(lr=0.003, weight_decay=0.0))),
    "adamw_warmup_cosine": (torch.optim.AdamW, [(DECAY, dict(weight_decay=0.1)), (NO_DECAY, dict(weight_decay=0.0))],
                            dict(lr=0.01, betas=(0.9, 0.95)),
                            lambda opt: lr_scheduler.SequentialLR(
                                opt, [lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=3),
                                      lr_scheduler.CosineAnnealingLR(opt, T_max=4, eta_min=1e-4)], milestones=[3]),
                            None),
    "sgd_step_lr": (torch.optim.SGD, [(DECAY, dict(lr=0.2)), (NO_DECAY, dict())], dict(lr=0.1, momentum=0.9),
                    lambda opt: lr_scheduler.StepLR(opt, step_size=2, gamma=0.5), None),
}


def sgd_two_groups():
    return torch.optim.SGD([{"params": [torch.zeros(1, requires_grad=True)]},
                            {"params": [torch.zeros(1, requires_grad=True)], "lr": 0.05}], lr=0.1)


def resumed_cosine(opt):
    """A cosine schedule built with last_epoch = 5 (a resume): PyTorch's first-step branch."""
    lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=0.001)  # sets initial_lr, as a first run would
    return lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=0.001, last_epoch=5)


# name -> function(optimizer) -> scheduler
SCHEDULERS = {
    "step_lr": lambda opt: lr_scheduler.StepLR(opt, step_size=3, gamma=0.5),
    "linear_warmup": lambda opt: lr_scheduler.LinearLR(opt, start_factor=0.25, end_factor=1.0, total_iters=6),
    "linear_decay": lambda opt: lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.1, total_iters=10),
    "cosine": lambda opt: lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=0.001),  # 4 half-periods
    "cosine_zero_floor": lambda opt: lr_scheduler.CosineAnnealingLR(opt, T_max=7),
    "cosine_resumed": resumed_cosine,
    "lambda_per_group": lambda opt: lr_scheduler.LambdaLR(opt, [lambda e: 0.95 ** e, lambda e: 1.0 / (e + 1)]),
    "lambda_warmup": lambda opt: lr_scheduler.LambdaLR(opt, lambda e: min(1.0, (e + 1) / 8)),
    "warmup_cosine": lambda opt: lr_scheduler.SequentialLR(
        opt, [lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=5),
              lr_scheduler.CosineAnnealingLR(opt, T_max=30, eta_min=1e-5)], milestones=[5]),
    "three_phases": lambda opt: lr_scheduler.SequentialLR(
        opt, [lr_scheduler.LinearLR(opt, start_factor=0.5, total_iters=4),
              lr_scheduler.StepLR(opt, step_size=2, gamma=0.7),
              lr_scheduler.CosineAnnealingLR(opt, T_max=10)], milestones=[4, 12]),
}

DTYPES = {"f32": torch.float32, "f64": torch.float64}


def make_inputs():
    """Parameters and gradients, drawn in float64 and rounded for float32."""
    generator = torch.Generator().manual_seed(4321)
    params = {name: torch.randn(shape, generator=generator, dtype=torch.float64) for name, shape in PARAMS}
    grads = []
    for step in range(STEPS):
        scale = [1.0, 0.2, 2.0, 0.5, 1.5, 0.1][step]  # varied sizes exercise amsgrad's maximum
        grads.append({name: scale * torch.randn(shape, generator=generator, dtype=torch.float64)
                      for name, shape in PARAMS})
    return params, grads


# Settings Tessera keeps as float64 whatever Python type the user gave (CosineAnnealingLR's
# default eta_min is the int 0).
FLOAT_SETTINGS = {"eta_min", "gamma", "start_factor", "end_factor"}


def flat_state_values(prefix, value):
    """A state_dict value as tensors: numbers 0-d (int64 or float64), lists float64 (or int64) vectors."""
    if prefix.rsplit(".", 1)[-1] in FLOAT_SETTINGS:
        return {prefix: torch.tensor(float(value), dtype=torch.float64)}
    if isinstance(value, bool):
        return {prefix: torch.tensor(float(value), dtype=torch.float64)}
    if isinstance(value, int):
        return {prefix: torch.tensor(value, dtype=torch.int64)}
    if isinstance(value, float):
        return {prefix: torch.tensor(value, dtype=torch.float64)}
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return {prefix: torch.tensor(list(value), dtype=torch.int64)}
    if isinstance(value, (list, tuple)) and all(isinstance(v, float) for v in value):
        return {prefix: torch.tensor(list(value), dtype=torch.float64)}
    raise TypeError(f"{prefix}: {value!r}")


# PyTorch bookkeeping with nothing to compute from: not part of Tessera's state dicts.
IGNORED_KEYS = {"verbose", "_get_lr_called_within_step", "lr_lambdas"}


def scheduler_state(prefix, state):
    """(tensors, key names) of a scheduler's state_dict, SequentialLR's nested ones flattened."""
    tensors, keys = {}, []
    for key, value in state.items():
        if key in IGNORED_KEYS:
            continue
        if key == "_schedulers":
            for k, nested in enumerate(value):
                t, n = scheduler_state(f"{prefix}_schedulers.{k}.", nested)
                tensors.update(t)
                keys += [f"_schedulers.{k}.{name}" for name in n]
            continue
        tensors.update(flat_state_values(prefix + key, value))
        keys.append(key)
    return tensors, keys


def run_optimizer(name, config, dtype_name, params0, grads):
    cls, groups, defaults, schedule, added = config
    dtype = DTYPES[dtype_name]
    params = {n: p.to(dtype).clone().requires_grad_() for n, p in params0.items()}
    optimizer = cls([dict(params=[params[n] for n in names], **options) for names, options in groups],
                    foreach=False, **defaults)  # the single-tensor path Tessera mirrors
    scheduler = schedule(optimizer) if schedule else None
    out, lrs = {}, []
    for step in range(STEPS):
        if added and added[0] == step:
            optimizer.add_param_group(dict(params=[params[n] for n in added[1]], **added[2]))
        for n, p in params.items():
            p.grad = grads[step][n].to(dtype).clone()
        optimizer.step()
        if scheduler:
            scheduler.step()
            lrs.append(scheduler.get_last_lr())
        prefix = f"{name}.{dtype_name}.step{step}"
        for n, p in params.items():
            out[f"{prefix}.param.{n}"] = p.detach().clone()
            for state_name, value in optimizer.state[p].items():
                if value is None:  # SGD without momentum keeps momentum_buffer = None
                    continue
                if state_name == "step":
                    value = torch.tensor(float(value), dtype=torch.float64)
                out[f"{prefix}.{state_name}.{n}"] = value.detach().clone()
    if scheduler:
        out[f"{name}.{dtype_name}.lr"] = torch.tensor(lrs, dtype=torch.float64)
    for g, group in enumerate(optimizer.state_dict()["param_groups"]):
        for key, value in group.items():
            if key in ("params", "foreach", "capturable", "differentiable", "fused"):
                continue
            tensor = (torch.tensor(list(value), dtype=torch.float64) if key == "betas"
                      else torch.tensor(float(value), dtype=torch.float64))
            out[f"{name}.{dtype_name}.param_groups.{g}.{key}"] = tensor
    return out


def run_scheduler(name, make):
    optimizer = sgd_two_groups()
    scheduler = make(optimizer)
    lrs = [list(scheduler.get_last_lr())]
    for _ in range(SCHEDULE_STEPS):
        optimizer.step()
        scheduler.step()
        lrs.append(list(scheduler.get_last_lr()))
    tensors, keys = scheduler_state(f"sched.{name}.state.", scheduler.state_dict())
    tensors[f"sched.{name}.lr"] = torch.tensor(lrs, dtype=torch.float64)
    return tensors, {f"sched.{name}.state_keys": ",".join(keys)}


def main():
    params, grads = make_inputs()
    tensors, metadata = {}, {}
    for dtype_name, dtype in DTYPES.items():
        for n, p in params.items():
            tensors[f"inputs.{dtype_name}.param.{n}"] = p.to(dtype)
        for step in range(STEPS):
            for n, g in grads[step].items():
                tensors[f"inputs.{dtype_name}.grad.{step}.{n}"] = g.to(dtype)
    for name, config in OPTIMIZERS.items():
        for dtype_name in DTYPES:
            tensors.update(run_optimizer(name, config, dtype_name, params, grads))
    import warnings
    with warnings.catch_warnings():  # SequentialLR's milestone step(0) warns of the deprecated epoch argument
        warnings.simplefilter("ignore")
        for name, make in SCHEDULERS.items():
            t, m = run_scheduler(name, make)
            tensors.update(t)
            metadata.update(m)
    os.makedirs(os.path.join(here, "data"), exist_ok=True)
    path = os.path.join(here, "data", "param_groups_golden.safetensors")
    metadata.update({"torch": torch.__version__, "steps": str(STEPS), "schedule_steps": str(SCHEDULE_STEPS),
                     "written_by": "tests/optim/make_param_groups_golden.py"})
    safetensors_torch.save(tensors, path, metadata=metadata)
    print(f"wrote {path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
