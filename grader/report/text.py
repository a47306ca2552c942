"""Small text helpers every format shares."""

from __future__ import annotations

from .results import Results

# Tests a student must not see the details of yet (Gradescope applies these itself).
HIDDEN_FROM_STUDENTS = ("hidden", "after_due_date", "after_published")


def num(x: float) -> str:
    return f"{x:g}"


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def visible(results: Results) -> tuple[list, int]:
    """The tests a student may read about, and how many more are hidden."""
    shown = [t for t in results.tests if t.visibility not in HIDDEN_FROM_STUDENTS]
    return shown, len(results.tests) - len(shown)
