"""PyTorch on the CPU as a user who cares about speed runs it, for every PyTorch side of
bench/ (the MNIST training benchmark, and any other that compares with PyTorch on a CPU).

Debian 12's PyTorch 1.13 calls Debian's OpenBLAS (libopenblas0-pthread, 0.3.21) when its
folder is first on LD_LIBRARY_PATH. That OpenBLAS picks its kernels from cpuid and, on a
CPU it does not know, falls back to older ones: on some Sapphire Rapids-class Xeons (as a
hypervisor reports them) generic Prescott kernels at 58 GFLOP/s instead of 200+, and
AMD Zen 4 may get AVX2 Zen kernels. So the launcher probes which core OpenBLAS chose and,
when this CPU supports better kernels than those, sets OPENBLAS_CORETYPE to them and checks
that OpenBLAS took them. ATen keeps its own choice of CPU kernels (what users get; on the
machines measured, ATEN_CPU_CAPABILITY=avx512 instead of PyTorch's AVX2 moved the MNIST
step by less than the run-to-run noise); the report names it.

In the launcher (a process that does not import torch):

    import torch_cpu
    env = torch_cpu.environment(threads=2)     # for subprocess.run([... script ...], env=env)
    torch_cpu.setup_line(env)                   # "OpenBLAS 0.3.21 core Cooperlake (...)"

In the PyTorch script, after `import torch` and torch.set_num_threads(...):

    result.update(torch_cpu.report())           # blas, openblas_core, aten_capability, ...
"""

import ctypes
import functools
import json
import os
import subprocess
import sys

OPENBLAS_DIR = "/usr/lib/x86_64-linux-gnu/openblas-pthread"
OPENBLAS_LIBRARY = os.path.join(OPENBLAS_DIR, "libopenblas.so.0")

# OpenBLAS cores by how much of an x86-64 CPU their float32 GEMM kernels use (Cooperlake
# and Sapphire Rapids add bfloat16 kernels to SkylakeX's; Zen runs Haswell's): the best
# core whose instructions this CPU has is the one to run. By the instructions, not the
# vendor: AMD Zen 4 (EPYC 9004, AVX-512 with BF16) gets Cooperlake, as later OpenBLAS
# releases pick for it by themselves (driver/others/dynamic.c, AMD family 19h: AVX512-BF16
# -> COOPERLAKE, AVX-512 -> SKYLAKEX, else ZEN; where this OpenBLAS picks ZEN, i.e. AVX2
# kernels, the launcher asks for COOPERLAKE); Zen 2/3, and a Zen 4 whose hypervisor hides
# AVX-512, keep OpenBLAS's own ZEN. Zen 4 runs 512-bit instructions as two 256-bit halves,
# but with the same FMA throughput the AVX-512 kernels issue half the instructions and have
# 32 registers for their tiles; OpenBLAS's maintainers chose them, not measured here.
_CORES = [  # (OPENBLAS_CORETYPE, rank, cpuinfo flags it needs), best first
    ("COOPERLAKE", 3, {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd", "avx512_bf16"}),
    ("SKYLAKEX", 3, {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"}),
    ("HASWELL", 2, {"avx2", "fma"}),
    ("SANDYBRIDGE", 1, {"avx"}),
]
_RANK_OF_NAME = {"cooperlake": 3, "sapphirerapids": 3, "skylakex": 3, "haswell": 2, "zen": 2, "sandybridge": 1}


def cpu_model():
    """The CPU's model name, as /proc/cpuinfo gives it."""
    return _cpuinfo_field("model name") or "unknown CPU"


def cpu_flags(cpuinfo=None):
    """The instruction-set flags of /proc/cpuinfo (or of the text `cpuinfo`)."""
    return set((_cpuinfo_field("flags", cpuinfo) or "").split())


def _cpuinfo_field(name, cpuinfo=None):
    """The first `name : value` of /proc/cpuinfo (or of the text `cpuinfo`)."""
    try:
        if cpuinfo is None:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
    except OSError:
        return None
    for line in cpuinfo.splitlines():
        if line.startswith(name):
            return line.split(":", 1)[1].strip()
    return None


_PROBE = ("import ctypes, json, sys; lib = ctypes.CDLL(sys.argv[1]); "
          "lib.openblas_get_corename.restype = ctypes.c_char_p; lib.openblas_get_config.restype = ctypes.c_char_p; "
          "print(json.dumps({'core': lib.openblas_get_corename().decode(), 'config': lib.openblas_get_config().decode()}))")


def probe_openblas(coretype=None):
    """{'core', 'config'} of OpenBLAS loaded afresh, with OPENBLAS_CORETYPE=coretype if given
    (a separate process: OpenBLAS reads the variable once, when it loads)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    result = subprocess.run([sys.executable, "-c", _PROBE, OPENBLAS_LIBRARY], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"cannot load {OPENBLAS_LIBRARY} (install libopenblas0-pthread: scripts/setup --bench):\n"
                           f"{result.stderr}")
    return json.loads(result.stdout)


def better_coretype(detected, flags, takes=lambda coretype: True):
    """The OPENBLAS_CORETYPE to run instead of `detected` (the core OpenBLAS picked by itself,
    as openblas_get_corename names it) on a CPU with these cpuinfo flags, or None when
    `detected` is already as good; takes(coretype) says whether this OpenBLAS runs that core
    when asked (a build may lack it)."""
    detected_rank = _RANK_OF_NAME.get(detected.lower(), 0)
    for coretype, rank, needs in _CORES:
        if rank <= detected_rank:
            break
        if needs <= flags and takes(coretype):
            return coretype
    return None


@functools.lru_cache(maxsize=None)
def openblas_choice():
    """What OpenBLAS picks by itself, and the OPENBLAS_CORETYPE to run it with instead (None
    when its own pick is already the best this CPU supports)."""
    detected = probe_openblas()["core"]
    coretype = better_coretype(detected, cpu_flags(),
                               lambda name: probe_openblas(name)["core"].lower() == name.lower())
    return {"detected": detected, "coretype": coretype}


def environment(threads, base=None):
    """The environment for a PyTorch CPU benchmark process: Debian's OpenBLAS first on
    LD_LIBRARY_PATH, on its best kernels, and every thread count set to `threads`."""
    env = dict(os.environ if base is None else base)
    env.pop("OPENBLAS_CORETYPE", None)
    env["LD_LIBRARY_PATH"] = OPENBLAS_DIR + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = str(threads)
    choice = openblas_choice()
    if choice["coretype"]:
        env["OPENBLAS_CORETYPE"] = choice["coretype"]
    return env


def setup_line(env):
    """One line for a results table: the OpenBLAS core PyTorch runs on and why."""
    choice = openblas_choice()
    config = probe_openblas(env.get("OPENBLAS_CORETYPE"))
    version = " ".join(config["config"].split()[:2])  # "OpenBLAS 0.3.21"
    if choice["coretype"]:
        return (f"{version} core {config['core']} (OPENBLAS_CORETYPE={choice['coretype']}; "
                f"by itself it picks {choice['detected']})")
    return f"{version} core {config['core']} (its own pick, the best this CPU supports)"


def report():
    """Inside the PyTorch process, after `import torch`: the BLAS it loaded, that BLAS's
    core, ATen's CPU capability and the versions, for the benchmark's JSON."""
    import torch

    blas = _loaded_library(("openblas", "libblis", "libmkl", "libblas.so"))
    core = None
    if blas and "openblas" in blas:
        library = ctypes.CDLL(blas)  # the copy already loaded
        library.openblas_get_corename.restype = ctypes.c_char_p
        core = library.openblas_get_corename().decode()
    capability = next((line.split(":", 1)[1].strip() for line in torch.__config__.show().splitlines()
                       if "CPU capability usage" in line), "unknown")
    return {"torch_version": torch.__version__, "blas": blas or "unknown", "openblas_core": core,
            "aten_capability": capability, "torch_threads": torch.get_num_threads(), "cpu": cpu_model()}


def _loaded_library(names):
    """The path of the first library of this process whose name contains one of `names`."""
    with open("/proc/self/maps") as maps:
        paths = [line.split()[-1] for line in maps if "/" in line]
    for name in names:
        for path in paths:
            if name in os.path.basename(path):
                return path
    return None
