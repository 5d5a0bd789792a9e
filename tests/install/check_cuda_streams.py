#!/usr/bin/env python3
"""Every CUDA operation in src/ runs on a stream it names (docs/gpu.md, "Streams and
ordering": the legacy default stream is never used, since the non-blocking compute stream
does not wait for it): no synchronous cudaMemcpy/cudaMemset/cudaMemcpy2D, no
cudaDeviceSynchronize, and every kernel launch passes a stream as its fourth launch
argument. Prints every violation with its file and line.
  check_cuda_streams.py SOURCE_ROOT
"""
import pathlib
import re
import sys

# The synchronous forms (their ...Async siblings take a stream).
LEGACY_CALLS = re.compile(r"\b(cudaMemcpy|cudaMemcpy2D|cudaMemcpyToSymbol|cudaMemset|cudaMemset2D|cudaDeviceSynchronize)\s*\(")
LAUNCH = re.compile(r"<<<(.*?)>>>", re.S)


def launch_arguments(configuration):
    """The top-level comma-separated arguments of a launch configuration."""
    depth, arguments, current = 0, [], ""
    for char in configuration:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            arguments.append(current)
            current = ""
        else:
            current += char
    arguments.append(current)
    return [argument.strip() for argument in arguments]


def without_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def main(root):
    problems = []
    for path in sorted(pathlib.Path(root, "src").rglob("*")):
        if path.suffix not in {".cu", ".cuh", ".cpp", ".h"}:
            continue
        text = without_comments(path.read_text())
        line_of = lambda offset: text.count("\n", 0, offset) + 1
        relative = path.relative_to(root)
        for match in LEGACY_CALLS.finditer(text):
            problems.append(f"{relative}:{line_of(match.start())}: {match.group(1)} runs on the legacy default stream; "
                            f"use its Async form on the compute stream")
        for match in LAUNCH.finditer(text):
            arguments = launch_arguments(match.group(1))
            if len(arguments) != 4 or arguments[3] in {"", "0", "nullptr", "NULL", "cudaStreamLegacy"}:
                problems.append(f"{relative}:{line_of(match.start())}: the launch <<<{match.group(1).strip()}>>> names "
                                f"no stream (grid, block, shared bytes, stream)")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
