"""Student feedback as one self-contained HTML page (no network: styles inline, pictures inline
SVG): per exercise and stage a card with its verdict and points; per distinct failure its one
line, the tests it fails, the student's source around the finding's line and the finding
explained in the words of its class; the pictures; every test in a folded table. Hidden tests are
counted, never described."""

from __future__ import annotations

import html
import re

from . import pictures
from .results import Results, Status, TestResult
from .table import stage_verdict
from .text import first_line, grouped, num, outcome, visible

esc = html.escape

# What a finding's class means and what usually fixes it, by its checker (Finding.check); the
# finding's own message (shown above it) names the kernel, line, threads, array and index.
EXPLAIN = {
    "races": "A data race: two threads used the same element, at least one of them writing, and "
             "nothing ordered the two accesses, so on a GPU the result depends on which runs first. "
             "The message names both accesses and both threads. Between threads of one block, put "
             "<code>cuda.syncthreads()</code> after the write and before the other thread's read (in a "
             "tiled loop: once after loading the tile, and once more before the next tile overwrites "
             "it); between blocks, use an atomic (<code>cuda.atomic.add</code>) or a second launch.",
    "bounds": "An out-of-bounds access: a thread used an index past the end of the array. The grid "
              "is rounded up to whole blocks, so whenever the size is not a multiple of the block size "
              "some threads have no element: the guard that is missing is <code>if i &lt; n:</code> around "
              "the access (for a 2-D grid <code>if row &lt; n and col &lt; m:</code>, and for a tile loaded "
              "into shared memory, a zero where the tile runs past the edge).",
    "uninitialised": "A read of memory nothing wrote: fresh device memory and shared arrays hold "
                     "garbage on a GPU (NaN on the simulator). Write every element before it is read: "
                     "start an accumulator at zero, load the whole tile (the padding past the edge too) "
                     "and call <code>cuda.syncthreads()</code> before any thread reads it.",
    "barriers": "A barrier not every thread of the block reached: a <code>cuda.syncthreads()</code> "
                "inside an <code>if</code> that some threads skip is undefined behaviour in CUDA (current "
                "GPUs let the others pass once the skipping threads have finished; older GPUs or other "
                "compilers may hang), and threads waiting at two different barriers may hang or pass at "
                "different points. Keep the barrier where every thread reaches it and guard only the "
                "memory accesses.",
    "warps": "A warp operation with the wrong lanes: a shuffle or vote (<code>cuda.shfl_down_sync</code>, "
             "<code>cuda.all_sync</code>, ...) whose mask names lanes that did not call it, or lanes "
             "calling it that its mask leaves out. Use <code>0xffffffff</code> only where all 32 lanes "
             "take part; otherwise keep every lane in the call and ignore the extra values.",
    "deadlock": "The threads waited for each other forever: a barrier or a spin loop that some thread "
                "never gets past. Every thread of a block must reach the same barriers.",
    "streams": "Two streams used the same device memory, at least one writing, with nothing ordering "
               "them: on a GPU they can run at the same time. Record an event on the first stream and make "
               "the second wait for it (<code>event.record(s1)</code>, <code>event.wait(s2)</code>), or "
               "synchronise the stream before the other one uses the data.",
    "devices": "Memory of one GPU used from another: an array lives on the device that was current when "
               "it was allocated. Allocate, copy and launch for device <i>k</i> inside "
               "<code>with cuda.gpus[k]:</code>, and move data between devices with an explicit copy.",
    "launch": "The launch configuration cannot run: at most 1024 threads per block, at least one block, "
              "and no more shared memory than a block may have.",
    "compile": "The kernel runs in Python but would not compile for a GPU: numba's type inference or the "
               "assembler refused it. The message names the construct; a kernel may use only numbers, "
               "arrays and the <code>cuda</code> functions (no lists, dicts, strings or Python objects).",
    "unsupported": "A CUDA feature the simulator does not model; the message names it. Grade this part "
                   "on a GPU, or write it with the features the simulator knows.",
    "error": "The simulator stopped the kernel; the message says why.",
}

# a missed counter criterion, as grader.judge.perf words it
# (counts with thousands separators: 1,179,648)
_CRITERION = re.compile(r"(?:.*?: )?(?P<label>[^:]+): (?P<yours>[-\d.,e+]+) against the reference's "
                        r"(?P<theirs>[-\d.,e+]+)(?: \(at (?:most|least) (?P<limit>[-\d.,e+]+) (?:allowed|needed)\))?")

STYLE = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:1em auto;padding:0 1em;color:#111}
h1{font-size:1.4em;margin-bottom:.2em} h2{font-size:1.1em;margin:0}
.card{border:1px solid #999;border-left-width:8px;border-radius:6px;margin:1em 0;padding:.6em 1em}
.card.passed{border-left-color:#2a7} .card.failed{border-left-color:#c22;border-left-style:double}
.card.partial{border-left-color:#c80;border-left-style:dashed}
.head{display:flex;justify-content:space-between;align-items:baseline;gap:1em}
.points{font-weight:bold;font-size:1.1em;white-space:nowrap}
.verdict{font-weight:bold;text-transform:uppercase;font-size:.8em;letter-spacing:.05em;margin-left:.6em}
.note{margin:.3em 0;color:#333}
.failure{border-top:1px solid #ccc;margin-top:.6em;padding-top:.4em}
.summary{font-weight:bold;margin:.2em 0} .tests{margin:.2em 0;font-size:.9em;color:#333}
.source{margin:.4em 0} .source figcaption{font-size:.85em;color:#333}
.source pre{background:#f6f6f6;border:1px solid #ddd;padding:.3em .5em;margin:0;overflow-x:auto}
.source .here{background:#fe8;font-weight:bold;display:inline-block;min-width:100%;outline:1px solid #000}
.explain{margin:.4em 0;max-width:60em}
.figures svg{max-width:100%;height:auto;margin:.3em .5em .3em 0;vertical-align:top}
pre{white-space:pre-wrap} code{font-size:.95em}
details{margin:.4em 0} summary{cursor:pointer}
table{border-collapse:collapse} td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top;text-align:left}
"""


def html_page(results: Results) -> str:
    """Student feedback as one self-contained HTML page; hidden tests are counted, never described."""
    shown, hidden = visible(results)
    cards = [_card(exercise, stage, [t for t in shown if t.exercise == exercise and t.stage == stage])
             for exercise in dict.fromkeys(t.exercise for t in shown)
             for stage in sorted({t.stage for t in shown if t.exercise == exercise})]
    note = f"<p class='note'>{hidden} more test(s) are hidden until after the due date.</p>" if hidden else ""
    notes = "".join(f"<p class='note'>Note: {esc(n)}</p>" for n in [results.backend_note, *results.notes] if n)
    rows = "".join(f"<tr class='{t.status}'><td><code>{esc(t.name)}</code></td><td>{t.stage}</td>"
                   f"<td>{num(t.score)}/{num(t.max_score)}</td><td>{esc(outcome(t))}</td></tr>" for t in shown)
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>" + esc(results.submission)
            + "</title><style>" + STYLE + "</style></head><body>"
            f"<h1>{esc(results.submission)}</h1><p><b>{num(sum(t.score for t in shown))}/"
            f"{num(sum(t.max_score for t in shown))}</b> on the {esc(results.backend)} backend</p>"
            + notes + note + "".join(cards)
            + "<details class='every'><summary>Every test</summary><table><tr><th>test</th><th>stage</th>"
            "<th>score</th><th>result</th></tr>" + rows + "</table></details></body></html>\n")


def _card(exercise: str, stage: int, tests: list[TestResult]) -> str:
    """One stage: its verdict and points, each distinct failure once (grouped as the terminal's
    `stage_verdict` groups them) with what stage_verdict says besides, and the stage's pictures."""
    got, out_of = sum(t.score for t in tests), sum(t.max_score for t in tests)
    failed = [t for t in tests if t.failed_itself]
    groups = grouped(failed)
    state = "failed" if failed else "passed" if got >= out_of and all(
        t.status == Status.PASSED for t in tests) else "partial"
    word = {"failed": "failed", "passed": "passed", "partial": "incomplete"}[state]
    # stage_verdict's lines besides the failures it groups: "ok (...)", tests not run, not gradable
    notes = [line for line in _verdict_lines(stage_verdict(tests)) if not line.startswith(tuple(groups))]
    body = "".join(f"<p class='note'>{esc(line)}</p>" for line in notes)
    body += "".join(_failure(head, members) for head, members in groups.items())
    figures = "".join(dict.fromkeys(f for t in tests for f in _figures(t)))
    if figures:
        body += f"<div class='figures'>{figures}</div>"
    return (f"<section class='card {state}' id='{esc(_anchor(exercise, stage))}'><div class='head'><h2>"
            f"{esc(exercise)} stage {stage}<span class='verdict'>{word}</span></h2>"
            f"<span class='points'>{num(got)}/{num(out_of)} points</span></div>{body}</section>")


def _verdict_lines(verdict: str) -> list[str]:
    """stage_verdict's text as its items: a failure's "fails N tests" line joined to it."""
    lines: list[str] = []
    for line in verdict.splitlines():
        if line.startswith("   fails ") and lines:
            lines[-1] += line
        elif not line.startswith("and ") or not line.endswith("(-v)"):  # the HTML shows every failure
            lines.append(line)
    return lines


def _anchor(exercise: str, stage: int) -> str:
    return "card-" + re.sub(r"[^A-Za-z0-9_-]", "-", exercise) + f"-{stage}"


def _failure(head: str, members: list[TestResult]) -> str:
    """One distinct failure: its line, the tests it fails, the source at the finding's line, the
    finding in the words of its class, and the rest of the message folded."""
    first = members[0]
    names = ", ".join(f"<code>{esc(t.name.split('::', 1)[-1])}</code>" for t in members)
    out = [f"<div class='failure' data-check='{esc(first.finding.check if first.finding else 'test')}'>"
           f"<p class='summary'>{esc(head)}</p>"
           f"<p class='tests'>fails {len(members)} test{'s' if len(members) > 1 else ''}: {names}</p>"]
    finding = next((t.finding for t in members if t.finding), None)
    source = next((t for t in members if t.source and t.finding and t.finding.line), None)
    if source is not None:
        out.append(_source(source))
    if finding is not None:
        where = [f"kernel <code>{esc(finding.kernel)}</code>" if finding.kernel else "",
                 f"block {_coords(finding.block)}" if finding.block else "",
                 f"thread {_coords(finding.thread)}" if finding.thread else "",
                 f"array <code>{esc(finding.array)}</code>" if finding.array else "",
                 f"index {_coords(finding.index)}" if finding.index else ""]
        where_text = ", ".join(w for w in where if w)
        out.append(f"<p class='explain'>{EXPLAIN.get(finding.check, EXPLAIN['error'])}"
                   + (f" Here: {where_text}." if where_text else "") + "</p>")
    rest = first.output.strip().split("\n", 1)[1].strip() if "\n" in first.output.strip() else ""
    if rest:
        out.append(f"<details><summary>the whole message</summary><pre>{esc(rest)}</pre></details>")
    out.append("</div>")
    return "".join(out)


def _coords(value: tuple) -> str:
    return str(value[0]) if len(value) == 1 else "(" + ", ".join(str(v) for v in value) + ")"


def _source(t: TestResult) -> str:
    """The student's lines around the finding's, numbered, its line marked without colour too:
    "▶", bold and outlined."""
    start, lines = t.source[0], t.source[1]
    width = len(str(start + len(lines) - 1))
    rows = []
    for k, text in enumerate(lines):
        number = start + k
        if number == t.finding.line:
            rows.append(f"<span class='here'><b>▶ {number:>{width}} │ {esc(text)}</b></span>")
        else:
            rows.append(f"  {number:>{width}} │ {esc(text)}")
    return (f"<figure class='source'><figcaption><code>{esc(t.finding.file or '')}</code>, line "
            f"{t.finding.line}</figcaption><pre>" + "\n".join(rows) + "</pre></figure>")


def _figures(t: TestResult) -> list[str]:
    """The test's pictures: a collective's traffic as a ring, a modelled timeline of copies and adds
    per stream, a performance test's time (and the counter it missed) against the reference's, the
    lanes of one warp's costliest request of the line it missed it at, a wrong matrix's mask."""
    figures = []
    if t.traffic:
        figures.append(pictures.ring_svg(t.traffic) or _missing())
    spans = (t.timing or {}).get("spans")
    if spans:
        title = f"modelled on {t.timing.get('gpu', '')}s, {int(t.timing.get('buffer_bytes', 0)) >> 20} MiB buffer"
        figures.append(pictures.timeline_svg(spans, title) or _missing())
    if t.timing and "reference_seconds" in t.timing and "seconds" in t.timing:
        figures.append(pictures.time_bars_svg(t.timing, _criterion(t)) or _missing())
    if t.request and t.status == Status.FAILED:
        draw = pictures.sectors_svg if t.request.get("space") == "global" else pictures.banks_svg
        figures.append(draw(t.request) or _missing())
    if t.wrong:
        figures.append(pictures.mask_svg(t.wrong) or _missing())
    return figures


def _criterion(t: TestResult) -> tuple | None:
    """The counter criterion a failed performance test missed, as its message names it."""
    if t.status != Status.FAILED:
        return None
    match = _CRITERION.match(first_line(t.output))
    if not match:
        return None
    try:
        def number(text: str) -> float:
            return float(text.replace(",", ""))
        limit = number(match["limit"]) if match["limit"] else None
        return match["label"].strip(), number(match["yours"]), number(match["theirs"]), limit
    except ValueError:
        return None


def _missing() -> str:
    return "<p><i>(pictures need matplotlib: pip install 'gpugrade[pictures]')</i></p>"
