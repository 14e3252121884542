#!/usr/bin/env python3
"""Fails on a tuple literal with `await` in an element after the first.

Swift 6.3.1 at -O miscompiles a closure that returns such a tuple through an
indirect result: the elements written before the suspension are lost
(Tests/ToolchainCheck reproduces it; it crashed `mv dir dir2`). Await into a
local first, then make the tuple, or return a named struct.

Usage: scripts/lint-async-tuples.py [FILE ...]   (default: Sources and Tests)
"""
from __future__ import annotations

import pathlib
import re
import sys

# A `(` after one of these words (or after an operator or punctuation) opens a
# tuple or a parenthesised expression, not a call's argument list.
OPENING_WORDS = {"return", "in", "await", "try", "else", "throw", "yield"}


def code_only(text: str) -> str:
    """Comments and string literals blanked, line breaks kept."""
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group()), text, flags=re.S)
    # One left-to-right pass, so a `//` inside a string (a URL) is not taken for a comment.
    return re.sub(r'"(?:\\.|[^"\\\n])*"|//[^\n]*', lambda m: '""' if m.group().startswith('"') else "", text)


def elements(text: str, start: int) -> tuple[list[str], int]:
    """The top-level, comma-separated elements of the group opened at `start`."""
    depth, parts, index = 0, [""], start
    while index < len(text):
        char = text[index]
        if char in "([{":
            depth += 1
            if depth == 1:
                index += 1
                continue
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                return parts, index
        if depth == 1 and char == ",":
            parts.append("")
        else:
            parts[-1] += char
        index += 1
    return parts, index


def findings(path: pathlib.Path) -> list[str]:
    text = code_only(path.read_text(encoding="utf-8"))
    found = []
    for match in re.finditer(r"\(", text):
        before = text[: match.start()].rstrip()
        if before and (before[-1].isalnum() or before[-1] in "_)]>?!"):
            word = re.search(r"(\w+)$", before)
            if not word or word.group(1) not in OPENING_WORDS:
                continue  # a call, a subscript, a declaration
        parts, end = elements(text, match.start())
        if len(parts) < 2:
            continue
        awaiting = [i for i, part in enumerate(parts) if re.search(r"\bawait\b", part)]
        if awaiting and awaiting[0] > 0:
            line = text.count("\n", 0, match.start()) + 1
            shown = " ".join(text[match.start() : end + 1].split())[:120]
            found.append(f"{path}:{line}: await inside a tuple literal: {shown}")
    return found


def main() -> int:
    root = pathlib.Path(__file__).resolve().parents[1]
    files = [pathlib.Path(a) for a in sys.argv[1:]] or sorted(
        p for d in ("Sources", "Tests") for p in (root / d).rglob("*.swift") if "ToolchainCheck" not in p.parts
    )
    problems = [line for path in files for line in findings(path)]
    for line in problems:
        print(line)
    if problems:
        print(f"lint-async-tuples: {len(problems)} tuple(s) with an await after the first element; "
              "await into a local first (see Tests/ToolchainCheck/main.swift)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
