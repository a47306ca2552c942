"""Student feedback as one self-contained HTML page; hidden tests are counted, never described."""

from __future__ import annotations

import html

from . import pictures
from .results import Results, Status, TestResult
from .text import num, visible


def html_page(results: Results) -> str:
    """Student feedback as one self-contained HTML page; hidden tests are counted, never described."""
    shown, hidden = visible(results)
    esc = html.escape
    rows = "".join(
        f"<tr class='{t.status}'><td><code>{esc(t.name)}</code></td><td>{t.stage}</td>"
        f"<td>{num(t.score)}/{num(t.max_score)}</td>"
        f"<td>{'ok' if t.status == Status.PASSED else '<pre>' + esc(t.output.strip()) + '</pre>'}</td></tr>"
        + _figures(t)
        for t in shown)
    note = f"<p>{hidden} more test(s) are hidden until after the due date.</p>" if hidden else ""
    return ("<!doctype html><html><head><meta charset='utf-8'><title>" + esc(results.submission) + "</title>"
            "<style>body{font-family:sans-serif}td,th{border:1px solid #ccc;padding:4px;vertical-align:top}"
            "table{border-collapse:collapse}.failed td:nth-child(3){color:#b00}.passed td:nth-child(3){color:#070}.not_gradable td:nth-child(3){color:#a60}"
            "pre{margin:0;white-space:pre-wrap}</style></head><body>"
            f"<h1>{esc(results.submission)}</h1><p><b>{num(sum(t.score for t in shown))}/"
            f"{num(sum(t.max_score for t in shown))}</b> on the {esc(results.backend)} backend</p>"
            "<table><tr><th>test</th><th>stage</th><th>score</th><th>result</th></tr>" + rows + "</table>"
            + note + "</body></html>\n")


def _figures(t: TestResult) -> str:
    """The test's pictures, in a row of their own under it: a collective's traffic as a ring, a
    modelled timeline of copies and adds per stream."""
    figures = []
    if t.traffic:
        figures.append(pictures.ring_svg(t.traffic) or _missing())
    spans = (t.timing or {}).get("spans")
    if spans:
        title = f"modelled on {t.timing.get('gpu', '')}s, {int(t.timing.get('buffer_bytes', 0)) >> 20} MiB buffer"
        figures.append(pictures.timeline_svg(spans, title) or _missing())
    if not figures:
        return ""
    return f"<tr class='figures'><td colspan='4'>{''.join(dict.fromkeys(figures))}</td></tr>"


def _missing() -> str:
    return "<p><i>(pictures need matplotlib: pip install 'gpugrade[pictures]')</i></p>"
