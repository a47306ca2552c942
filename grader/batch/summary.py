"""The class summary page of a batch folder (`summary.html`): per exercise and stage the score
distribution as a picture and the mean, the students who could not be graded and why, and the
most common failure kinds (the first line of each failed test's message, counted over students,
each with the students who have it)."""

from __future__ import annotations

import html
from collections import Counter

from ..report import pictures
from ..report.text import first_line

MOST_COMMON = 12
NAMES_SHOWN = 20  # students named under a failure kind (then "and N more")


def summary_page(rows: list, exercises: list[str], title: str) -> str:
    esc = html.escape
    graded = [r for r in rows if r.status == "graded" and r.results is not None]
    errors = [r for r in rows if r.status != "graded"]
    stale = [r for r in rows if r.latest_failure]  # the latest fetch failed: the stored row is shown
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>",
             "<style>body{font-family:sans-serif}td,th{border:1px solid #ccc;padding:4px;vertical-align:top}"
             "table{border-collapse:collapse}.figs svg{margin:4px}</style></head><body>",
             f"<h1>{esc(title)}</h1><p>{len(rows)} students: {len(graded)} graded, {len(errors)} not graded.</p>"]
    if stale:
        parts.append(f"<h2>Latest fetch failed</h2><p><b>{len(stale)} student(s): the latest fetch of the "
                     f"repository failed; the grade shown for them is the one stored before.</b></p>"
                     "<table><tr><th>student</th><th>stored commit</th><th>stored score</th><th>why the fetch "
                     "failed</th></tr>")
        parts += [f"<tr><td>{esc(r.key.student_id)}</td><td><code>{esc(r.key.commit)}</code></td>"
                  f"<td>{'not graded' if r.status != 'graded' else f'{r.score:g} / {r.max_score:g}'}</td>"
                  f"<td>{esc(r.latest_failure)}</td></tr>" for r in stale]
        parts.append("</table>")
    for exercise in exercises:
        stages = sorted({t.stage for r in graded for t in r.results.tests if t.exercise == exercise})
        if not stages:
            continue
        parts.append(f"<h2>{esc(exercise)}</h2><table><tr><th>part</th><th>mean</th><th>full marks</th></tr>")
        figures = []
        for stage in [None, *stages]:
            scores, maximum = _scores(graded, exercise, stage)
            label = "whole exercise" if stage is None else f"stage {stage}"
            mean = sum(scores) / len(scores) if scores else 0.0
            full = sum(1 for s in scores if s >= maximum > 0)
            parts.append(f"<tr><td>{label}</td><td>{mean:.2f} / {maximum:g}</td><td>{full} of {len(scores)}</td></tr>")
            figures.append(pictures.histogram_svg(scores, maximum, f"{exercise}: {label}"))
        parts.append("</table>")
        if any(figures):
            parts.append(f"<div class='figs'>{''.join(figures)}</div>")
        elif not pictures.available():
            parts.append("<p><i>(pictures need matplotlib: pip install 'gpugrade[pictures]')</i></p>")
    kinds = _failure_kinds(graded)
    if kinds:
        parts.append("<h2>Most common failures</h2><table><tr><th>students</th><th>failure</th><th>who</th></tr>")
        parts += [f"<tr><td>{len(who)}</td><td><code>{esc(kind)}</code></td><td>{esc(_names(who))}</td></tr>"
                  for kind, who in kinds]
        parts.append("</table>")
    if errors:
        parts.append("<h2>Not graded</h2><table><tr><th>student</th><th>reason</th></tr>")
        parts += [f"<tr><td>{esc(r.key.student_id)}</td><td>{esc(r.reason)}</td></tr>" for r in errors]
        parts.append("</table>")
    parts.append("</body></html>\n")
    return "".join(parts)


def _scores(graded: list, exercise: str, stage: int | None) -> tuple[list[float], float]:
    scores, maximum = [], 0.0
    for row in graded:
        tests = [t for t in row.results.tests if t.exercise == exercise and (stage is None or t.stage == stage)]
        scores.append(sum(t.score for t in tests))
        maximum = max(maximum, sum(t.max_score for t in tests))
    return scores, maximum


def _failure_kinds(graded: list) -> list[tuple[str, list[str]]]:
    """First lines of failure messages with the digits masked (sizes, indices), each with the
    students who have it (each student once), the most common first."""
    import re

    counts: Counter = Counter()
    who: dict[str, list[str]] = {}
    for row in graded:
        seen = {re.sub(r"\d+", "N", first_line(t.output))[:160] for t in row.results.tests
                if t.failed_itself and t.output}
        counts.update(seen)
        for kind in seen:
            who.setdefault(kind, []).append(row.key.student_id)
    return [(kind, sorted(who[kind])) for kind, _ in counts.most_common(MOST_COMMON)]


def _names(students: list[str]) -> str:
    shown = ", ".join(students[:NAMES_SHOWN])
    return shown + (f" and {len(students) - NAMES_SHOWN} more" if len(students) > NAMES_SHOWN else "")


__all__ = ["summary_page"]
