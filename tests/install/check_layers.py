#!/usr/bin/env python3
"""The library's folders depend one way (DESIGN.md): tensor <- autograd <- nn <- optim,
fsdp <- dist, with io, data and text beside them. Each folder of src/ may include only the
folders listed for it below; MPI, NCCL and cuDNN headers stay in the folders that wrap
them; and no folder reaches into another's detail namespace (checkpoint/ once did into
fsdp::detail). The backends are registered in one layer, not named everywhere: outside
tensor/cuda/ itself, only the dispatch files (and dist/'s NCCL group, which wraps CUDA
streams) test TESSERA_HAS_CUDA or include the CUDA backend's headers. Prints every
violation with its file and line.
  check_layers.py SOURCE_ROOT
"""
import pathlib
import re
import sys

ALLOWED = {
    "tensor": set(),
    "autograd": {"tensor"},
    "io": {"tensor"},
    "dist": {"tensor"},
    "data": {"io", "tensor"},
    "text": {"io", "tensor"},
    "nn": {"autograd", "tensor"},
    "models": {"autograd", "io", "nn", "tensor"},
    "optim": {"autograd", "nn", "tensor"},
    "fsdp": {"autograd", "dist", "nn", "tensor"},
    "checkpoint": {"autograd", "dist", "fsdp", "io", "nn", "optim", "tensor"},
}
# Third-party headers that belong to one folder's backend.
OWNED_HEADERS = {"mpi.h": {"dist"}, "nccl.h": {"dist"}, "cudnn.h": {"tensor"}}

# The files that may name the CUDA backend (besides src/tensor/cuda/).
BACKEND_CHOOSERS = {
    "src/tensor/native_dispatch.cpp",  # ops and the optimizers' fused updates
    "src/tensor/backend_memory.cpp",  # allocators, pinned memory, byte copies
    "src/tensor/cuda_api.cpp",  # the public ts::cuda:: queries
    "src/dist/nccl_process_group.h",
    "src/dist/nccl_process_group.cpp",
}
NAMES_CUDA_BACKEND = re.compile(r'TESSERA_HAS_CUDA|#\s*include\s*"tessera/tensor/cuda/')

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
FOREIGN_DETAIL = re.compile(r"\b(tensor|autograd|io|dist|data|text|nn|models|optim|fsdp|checkpoint)::detail::")


def main(root):
    src = pathlib.Path(root) / "src"
    problems = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in {".h", ".cpp", ".cu", ".cuh", ".inc"} or not path.is_file():
            continue
        folder = path.relative_to(src).parts[0]
        if folder not in ALLOWED:
            continue  # tessera.h, config.h: the umbrella includes everything
        relative = path.relative_to(root).as_posix()
        may_name_cuda = relative in BACKEND_CHOOSERS or relative.startswith("src/tensor/cuda/")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{path.relative_to(root)}:{number}"
            if not may_name_cuda and NAMES_CUDA_BACKEND.search(line):
                problems.append(f"{where}: names the CUDA backend; only the dispatch layer may "
                                f"({', '.join(sorted(BACKEND_CHOOSERS))})")
            match = INCLUDE.match(line)
            if match:
                header = match.group(1)
                parts = header.split("/")
                if parts[0] == "tessera" and len(parts) > 2:
                    other = parts[1]
                    if other != folder and other not in ALLOWED.get(folder, set()):
                        problems.append(f"{where}: {folder}/ includes {header} ({other}/ is not below {folder}/)")
                owners = OWNED_HEADERS.get(header)
                if owners is not None and folder not in owners:
                    problems.append(f"{where}: {folder}/ includes {header} (only {', '.join(sorted(owners))}/ may)")
            for detail in FOREIGN_DETAIL.finditer(line):
                if detail.group(1) != folder:
                    problems.append(f"{where}: {folder}/ uses {detail.group(0)} (another folder's internals)")
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print(f"src/: {len(ALLOWED)} folders, every include one way")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
