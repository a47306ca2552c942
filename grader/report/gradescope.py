"""Gradescope's autograder `results.json`."""

from __future__ import annotations

from .results import Results, Status
from .text import first_line


def gradescope(results: Results) -> dict:
    """Gradescope's results.json. `score` is given explicitly as the sum of the tests."""
    doc = {
        "score": results.score,
        "execution_time": results.execution_time,
        "output": f"Graded on the {results.backend} backend"
                  + (f" in the {results.sandbox} sandbox." if results.sandbox else ".")
                  + "".join(f"\nNote: {n}" for n in results.notes),
        "output_format": "text",
        "test_output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": [
            {"score": t.score, "max_score": t.max_score, "status": "passed" if t.status == Status.PASSED else "failed", "name": t.name,
             "name_format": "text", "number": number, "output": t.output,
             "output_format": "text", "tags": [t.exercise, f"stage {t.stage}", *t.tags],
             "visibility": t.visibility}
            for t, number in zip(results.tests, _numbers(results))
        ],
    }
    if results.errors:
        doc["output"] += "\nThe autograder hit an internal error; your instructor has been told:\n" + "\n".join(
            first_line(e) for e in results.errors)
    return doc


def _numbers(results: Results) -> list[str]:
    """Each test's `exercise.stage.k`, k counting the tests of its stage from 1 (Gradescope orders by it)."""
    counted: dict[tuple[str, int], int] = {}
    numbers = []
    for test in results.tests:
        counted[test.exercise, test.stage] = counted.get((test.exercise, test.stage), 0) + 1
        numbers.append(f"{test.exercise}.{test.stage}.{counted[test.exercise, test.stage]}")
    return numbers
