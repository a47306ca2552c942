"""A benchmark's table in docs/BENCHMARKS.md: replaced between its own markers, appended the
first time, so each benchmark rewrites only its section."""

from __future__ import annotations

from pathlib import Path


def write_section(doc: Path, text: str, begin: str, end: str) -> None:
    """`text` (which starts with `begin` and ends with `end`) in place of the old section."""
    old = doc.read_text() if doc.is_file() else ""
    if begin in old and end in old:
        new = old[:old.index(begin)] + text + old[old.index(end) + len(end):]
    else:
        new = old.rstrip() + "\n\n" + text + "\n"
    doc.write_text(new)
