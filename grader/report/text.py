"""Small text helpers every format shares."""

from __future__ import annotations

import re

from .results import Results, Status

# Tests a student must not see the details of yet (Gradescope applies these itself).
HIDDEN_FROM_STUDENTS = ("hidden", "after_due_date", "after_published")


def num(x: float) -> str:
    return f"{x:g}"


# not a line number (`vector_add.py:70`, a notebook's `cell 3, line 7`), not in a name
_NUMBERS = re.compile(r"(?<![:\w])(?<!cell )(?<!line )[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def duration(seconds: float) -> str:
    """2250 us as 2.25 ms, 755,000 us as 755 ms: no exponent in a line a student reads."""
    if seconds >= 1.0:
        return f"{seconds:.3g} s"
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} us"


def listed(items: list[str], most: int = 20) -> str:
    """The first `most` of `items`, comma separated, and " ..." when there are more."""
    return ", ".join(items[:most]) + (" ..." if len(items) > most else "")


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def grouped(failed: list) -> dict[str, list]:
    """Each distinct failure once, with the tests it fails: tests failing on one simulator
    finding (the same kind, line and array, whatever the thread or index) or with first lines
    that differ only in their numbers (one bug at several sizes: "with n=1000: 744 of 1000
    elements wrong", "with n=1025: 769 of 1025 ...") are one group, shown by its first test's
    first line. Line numbers stay (a file's line: vector_add.py:70; a notebook's: cell 3, line 7)."""
    keys: dict = {}
    groups: dict[str, list] = {}
    for t in failed:
        f = getattr(t, "finding", None)
        key = (f.type, f.file, f.line, f.array) if f is not None and f.line else _NUMBERS.sub("#", first_line(t.output))
        head = keys.setdefault(key, first_line(t.output) or "failed")
        groups.setdefault(head, []).append(t)
    return groups


def visible(results: Results) -> tuple[list, int]:
    """The tests a student may read about, and how many more are hidden."""
    shown = [t for t in results.tests if t.visibility not in HIDDEN_FROM_STUDENTS]
    return shown, len(results.tests) - len(shown)


def outcome(t) -> str:
    """A test's result in one line: 'ok' (with its time, for a performance test) or its failure."""
    if t.status == Status.PASSED:
        timing = getattr(t, "timing", None)
        if timing:
            baseline = f"{timing['baseline']}'s" if timing.get("baseline") else "the reference's"
            return (f"ok: {timing['source']} {duration(timing['seconds'])} on {timing['gpu']}, "
                    f"{timing['ratio']:.2f}x {baseline} time")
        return "ok"
    return first_line(t.output) or "failed"
