"""Turns the ```cpp blocks of an API guide page (docs/api/*.md) into one C++ program that
compiles them all and runs the whole programs among them, so that the unit suite fails
when a documented example stops compiling, throws, or returns non-zero (the guide's
promise: what it shows works).

    python3 tests/doc_examples.py docs/api/nn.md OUT.cpp

A block is one of:
- a whole program (it has `int main(`): its #include lines go to the top of the file, the
  rest into a namespace of its own (doc_example_N), where its main is an ordinary function
  that also returns 0 when it reaches its end. The generated main runs each one in order,
  in a fresh temporary directory (examples may write files), passing argc and argv on
  when the example takes them. A block preceded by `<!-- not run: REASON -->` (it reads
  data/, say) is only compiled.
- a fragment (no main): a few lines in the middle of a program. It is compiled as the body
  of a function, after the page's context: the C++ inside `<!-- context ... -->` comments
  of the page (declarations the fragments use: `Net model;`, a loader, `argc`/`argv` are
  parameters). Fragments are compiled, never run.
"""
import os
import re
import sys

source, out = sys.argv[1], sys.argv[2]
text = open(source, encoding="utf-8").read()
# How messages name the page: from docs/ on, whatever folder the build runs in.
shown = os.path.normpath(source)
shown = shown[shown.rfind("docs" + os.sep):] if "docs" + os.sep in shown else shown

BLOCK = re.compile(r"^```cpp\n(.*?)^```", flags=re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not run:[^>]*-->\s*$")
CONTEXT = re.compile(r"<!--\s*context\b[^\n]*\n(.*?)-->", flags=re.S)


def line_of(offset):
    return text.count("\n", 0, offset) + 1


def end_of_body(code, start):
    """The index of the brace closing the block opened at code[start] == '{', skipping
    strings, characters and comments."""
    depth, i = 0, start
    while i < len(code):
        c = code[i]
        if code.startswith("//", i):
            i = code.find("\n", i)
            i = len(code) if i < 0 else i
            continue
        if code.startswith("/*", i):
            i = code.index("*/", i) + 2
            continue
        if c == "'" and i > 0 and code[i - 1].isalnum():
            pass  # a digit separator (100'000), not a character literal
        elif c in "\"'":
            i += 1
            while code[i] != c:
                i += 2 if code[i] == "\\" else 1
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    sys.exit(f"doc_examples.py: {source}: unbalanced braces in an example")


context = "\n".join(block.strip("\n") for block in CONTEXT.findall(text))
includes, bodies, runs = [], [], []
context_lines = [line for line in context.splitlines() if not line.startswith("#include")]
includes += [line for line in context.splitlines() if line.startswith("#include")]
matches = list(BLOCK.finditer(text))
if not matches:
    sys.exit(f"doc_examples.py: no ```cpp block in {source}")
for number, match in enumerate(matches, 1):
    lines = match.group(1).splitlines()
    includes += [line for line in lines if line.startswith("#include") and line not in includes]
    code = "\n".join(line for line in lines if not line.startswith("#include"))
    where = f"{shown}:{line_of(match.start())}"
    main = re.search(r"\bint\s+main\s*\(([^)]*)\)\s*\{", code)
    if main:
        close = end_of_body(code, main.end() - 1)
        code = code[:close] + "  return 0;  // added: the end of main\n" + code[close:]
        before = text[: match.start()].rstrip("\n").splitlines()
        if not (before and NOT_RUN.search(before[-1])):
            runs.append((number, where, main.group(1).strip() != ""))
        bodies.append(f"// {where}, example {number}\nnamespace doc_example_{number} {{\n{code}\n}}"
                      f"  // namespace doc_example_{number}\n")
    else:
        context_body = "\n".join("  " + line for line in context_lines)
        bodies.append(f"// {where}, example {number} (a fragment)\nnamespace doc_example_{number} {{\n"
                      f"[[maybe_unused]] void fragment([[maybe_unused]] int argc, [[maybe_unused]] char** argv) {{\n"
                      f"{context_body}\n  {{\n{code}\n  }}\n}}\n}}  // namespace doc_example_{number}\n")

runner = ["int main([[maybe_unused]] int argc, [[maybe_unused]] char** argv) {", "  int failed = 0;"]
for number, where, takes_arguments in runs:
    call = f"doc_example_{number}::main({'argc, argv' if takes_arguments else ''})"
    runner.append(f'  failed += doc_examples::run("{where}", [&] {{ return {call}; }});')
runner += [f'  std::printf("%d of {len(runs)} examples of {shown} failed ({len(matches) - len(runs)} '
           'compiled only)\\n", failed);', "  return failed == 0 ? 0 : 1;", "}"]

with open(out, "w", encoding="utf-8") as file:
    file.write(f"// Generated from {shown} by tests/doc_examples.py: its {len(matches)} examples, compiled;\n"
               f"// the {len(runs)} whole programs not marked `not run` are run by main.\n")
    file.write("\n".join(includes) + '\n#include "doc_examples_run.h"\n\nnamespace ts = tessera;  // for the fragments\n\n'
               + "\n".join(bodies) + "\n")
    file.write("\n".join(runner) + "\n")
