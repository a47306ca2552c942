"""Student feedback as Markdown; hidden tests are counted, never described."""

from __future__ import annotations

from .results import Results, Status
from .text import num, outcome, visible


def markdown(results: Results) -> str:
    """Student feedback as Markdown; hidden tests are counted, never described."""
    shown, hidden = visible(results)
    lines = [f"# {results.submission}", "", f"**{num(sum(t.score for t in shown))}/"
             f"{num(sum(t.max_score for t in shown))}** on the {results.backend} backend", "",
             "| test | stage | score | result |", "|---|---|---|---|"]
    for t in shown:
        result = outcome(t).replace("|", "\\|")
        lines.append(f"| `{t.name}` | {t.stage} | {num(t.score)}/{num(t.max_score)} | {result} |")
    if hidden:
        lines += ["", f"{hidden} more test(s) are hidden until after the due date."]
    failures = [t for t in shown if t.status == Status.FAILED and "\n" in t.output.strip()]
    for t in failures:
        lines += ["", f"## {t.name}", "", "```", t.output.strip(), "```"]
    return "\n".join(lines) + "\n"
