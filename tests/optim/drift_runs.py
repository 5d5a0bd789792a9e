#!/usr/bin/python3
"""More free-running float32 runs of PyTorch per window than the golden holds, for issue
#25's open question: do Tessera's float32 runs cross the loss surface's kinks more often
than PyTorch's, or is 11 of 28 against 6 of 28 chance? Same setting, windows and
perturbation rule as make_float32_accuracy_golden.py (run r > 0: every weight moved by one
float32 ulp as perturbation_directions(r) says). Writes the float32 losses of runs
FIRST..LAST-1 of every window to OUT (safetensors: drift.f32 [WINDOWS, RUNS, 36], metadata
first_run); the float64 references come from Tessera's float64 runs of the same starts
(which match PyTorch's float64 to 1e-9, far below the float32 drifts), computed by

    TESSERA_DRIFT_RUNS=OUT build/tests/optim/test_optim -tc='*more runs*'

    /usr/bin/python3 tests/optim/drift_runs.py --first 7 --last 31 --out data/drift_runs.safetensors
"""

import argparse
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import make_float32_accuracy_golden as golden  # noqa: E402
import torch  # noqa: E402

safetensors_torch, torch_cpu = golden.safetensors_torch, golden.torch_cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--first", type=int, default=7, help="first run [7: after the golden's]")
    parser.add_argument("--last", type=int, default=31, help="one past the last run [31]")
    parser.add_argument("--threads", type=int, default=1, help="PyTorch's threads [1]")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if os.environ.get("GOLDEN_LAUNCHED") != "1":
        env = torch_cpu.environment(threads=args.threads)
        env["GOLDEN_LAUNCHED"] = "1"
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    torch.set_num_threads(args.threads)
    data = safetensors_torch.load(golden.DRIFT_FILE)
    stored = safetensors_torch.load(golden.WEIGHTS_FILE)
    weights = {name: stored[name].clone() for name, _ in golden.Net().named_parameters()}
    runs = range(args.first, args.last)
    f32 = torch.zeros(golden.WINDOWS, len(runs), golden.STEPS, dtype=torch.float64)
    for w in range(golden.WINDOWS):
        order = golden.window_order(w, data["images"].shape[0])
        images, labels = data["images"][order].contiguous(), data["labels"][order].contiguous()
        for i, run in enumerate(runs):
            losses = golden.free_running(golden.perturbed(weights, run), images, labels, torch.float32)
            f32[w, i] = torch.tensor(losses, dtype=torch.float64)
        print(f"window {w}: {len(runs)} runs", flush=True)
    report = torch_cpu.report()
    safetensors_torch.save({"drift.f32": f32}, args.out, metadata={
        "first_run": str(args.first), "torch": torch.__version__, "threads": str(args.threads),
        "aten_capability": report["aten_capability"], "cpu": torch_cpu.cpu_model(),
        "written_by": "tests/optim/drift_runs.py"})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
