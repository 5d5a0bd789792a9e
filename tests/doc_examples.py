"""Turns the ```cpp blocks of a Markdown page into one C++ file that compiles them all, so
that the build fails when a documented example stops compiling (the API guide's promise).

Each block is a whole program. Its #include lines go to the top of the file; the rest goes
into a namespace of its own (doc_example_1, ...), where its main is an ordinary function
(compiled with -Wno-return-type: only the global main may end without a return).
    python3 tests/doc_examples.py docs/api/text.md OUT.cpp
"""
import re
import sys

source, out = sys.argv[1], sys.argv[2]
blocks = re.findall(r"^```cpp\n(.*?)^```", open(source, encoding="utf-8").read(), flags=re.S | re.M)
if not blocks:
    sys.exit(f"doc_examples.py: no ```cpp block in {source}")
includes, bodies = [], []
for number, block in enumerate(blocks, 1):
    lines = block.splitlines()
    includes += [line for line in lines if line.startswith("#include") and line not in includes]
    body = "\n".join(line for line in lines if not line.startswith("#include"))
    bodies.append(f"// {source}, example {number}\nnamespace doc_example_{number} {{\n{body}\n}}  // namespace doc_example_{number}\n")
with open(out, "w", encoding="utf-8") as file:
    file.write(f"// Generated from {source} by tests/doc_examples.py: its {len(blocks)} examples, compiled.\n")
    file.write("\n".join(includes) + "\n\n" + "\n".join(bodies))
