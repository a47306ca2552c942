"""Student feedback as Markdown: one row per stage, each failure told once with the tests it
fails, every test in a folded table at the end; hidden tests are counted, never described."""

from __future__ import annotations

import html
import re

from .results import Results
from .table import stage_verdict
from .text import grouped, num, outcome, visible


def _text(text: str) -> str:
    """A line of the student's words as Markdown shows text: its HTML characters escaped (a
    message is the student's, `<img onerror=...>` in it too)."""
    return html.escape(text, quote=False)


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|").replace("\n", "<br>")


def _fenced(text: str) -> list[str]:
    """`text` as a code block whose fence no run of backticks in it closes."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", text)), default=0))
    return [fence, text, fence]


def markdown(results: Results) -> str:
    """Student feedback as Markdown; hidden tests are counted, never described."""
    shown, hidden = visible(results)
    lines = [f"# {results.submission}", "", f"**{num(sum(t.score for t in shown))}/"
             f"{num(sum(t.max_score for t in shown))}** on the {results.backend} backend", "",
             *(f"Note: {_text(note)}  " for note in results.notes), *([""] if results.notes else []),
             "| stage | score | result |", "|---|---|---|"]
    exercises = list(dict.fromkeys(t.exercise for t in shown))
    for exercise in exercises:
        for stage in sorted({t.stage for t in shown if t.exercise == exercise}):
            tests = [t for t in shown if t.exercise == exercise and t.stage == stage]
            got, out_of = sum(t.score for t in tests), sum(t.max_score for t in tests)
            lines.append(f"| {exercise} stage {stage} | {num(got)}/{num(out_of)} | {_cell(stage_verdict(tests))} |")
    if hidden:
        lines += ["", f"{hidden} more test(s) are hidden until after the due date."]
    groups = grouped([t for t in shown if t.failed_itself])
    if groups:
        lines += ["", "## What failed"]
    for head, members in groups.items():  # each distinct failure once, its tests under it
        lines += ["", f"### {_text(head)}", "", "Fails: " + ", ".join(f"`{t.name}`" for t in members)]
        output = members[0].output.strip()
        rest = output.split("\n", 1)[1].strip() if "\n" in output else ""
        if rest:
            lines += ["", *_fenced(rest)]
    lines += ["", "<details><summary>Every test</summary>", "", "| test | stage | score | result |",
              "|---|---|---|---|"]
    lines += [f"| `{t.name}` | {t.stage} | {num(t.score)}/{num(t.max_score)} | {_cell(outcome(t))} |" for t in shown]
    lines += ["", "</details>"]
    return "\n".join(lines) + "\n"
