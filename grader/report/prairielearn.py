"""PrairieLearn's external-grader results."""

from __future__ import annotations

from .results import Results
from .text import first_line, num

PRAIRIELEARN_MAX_BYTES = 1_000_000


def prairielearn(results: Results) -> dict:
    """PrairieLearn's external-grader results: score in [0, 1], at most 1 MB in all."""
    budget = PRAIRIELEARN_MAX_BYTES // max(1, 2 * len(results.tests) + 2)
    doc = {
        "gradable": True,
        "score": round(results.score / results.max_score, 6) if results.max_score else 0.0,
        "message": f"{num(results.score)}/{num(results.max_score)} on the {results.backend} backend",
        "output": "\n".join([*(f"Note: {n}" for n in results.notes), *results.errors])[:budget],
        "tests": [{"name": t.name, "description": f"{t.exercise}, stage {t.stage}", "points": t.score,
                   "max_points": t.max_score, "message": first_line(t.output)[:budget], "output": t.output[:budget]}
                  for t in results.tests],
    }
    return doc
