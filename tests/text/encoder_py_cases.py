"""Prints the tokens GPT-2's original encoder (OpenAI's encoder.py: Python's `regex` module,
whose \\s is Unicode's White_Space) gives for the texts where JavaScript's \\s, and so npm's
Encoder.js, differs: U+0085 (White_Space, not JavaScript's \\s) and U+FEFF (the reverse).
U+180E (White_Space in neither; PCRE2's \\s would take it) is checked alongside.
tests/text/test_gpt2_tokenizer.cpp holds the output.
    python3 tests/text/encoder_py_cases.py [data/gpt2]     (needs the `regex` module)
"""
import json
import sys

import regex

directory = sys.argv[1] if len(sys.argv) > 1 else "data/gpt2"
encoder = json.load(open(f"{directory}/encoder.json", encoding="utf-8"))
merges = open(f"{directory}/vocab.bpe", encoding="utf-8").read().split("\n")[1:-1]
ranks = {tuple(line.split()): rank for rank, line in enumerate(merges)}
printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
moved = [b for b in range(256) if b not in printable]
byte_to_char = {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(moved)}
pattern = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def bpe(word):
    parts = list(word)
    while len(parts) > 1:
        pairs = {(a, b) for a, b in zip(parts, parts[1:])}
        best = min(pairs, key=lambda pair: ranks.get(pair, float("inf")))
        if best not in ranks:
            break
        merged, i = [], 0
        while i < len(parts):
            if i + 1 < len(parts) and (parts[i], parts[i + 1]) == best:
                merged.append(parts[i] + parts[i + 1])
                i += 2
            else:
                merged.append(parts[i])
                i += 1
        parts = merged
    return parts


def encode(text):
    tokens = []
    for piece in pattern.findall(text):
        tokens += [encoder[part] for part in bpe("".join(byte_to_char[b] for b in piece.encode("utf-8")))]
    return tokens


for text in ["x \u0085y", "a\u0085\u0085 b", "x \ufeffy", "a \ufeff\ufeff b", "x \u180ey", "\u180e \u180e"]:
    print(json.dumps(text), encode(text), [piece for piece in pattern.findall(text)])
