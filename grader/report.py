"""Results rendered for people and for other systems: terminal table, Gradescope, PrairieLearn,
JUnit XML, Markdown and HTML feedback, and our own JSON."""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from io import StringIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .results import Results, Status

FORMATS = ("table", "gradescope", "prairielearn", "junit", "markdown", "html", "json")
# Tests a student must not see the details of yet (Gradescope applies these itself).
HIDDEN_FROM_STUDENTS = ("hidden", "after_due_date", "after_published")
PRAIRIELEARN_MAX_BYTES = 1_000_000


def _num(x: float) -> str:
    return f"{x:g}"


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def table(results: Results, console: Console | None = None, width: int = 110) -> str:
    """The score table a student or instructor reads: one row per test, subtotals per stage."""
    console = console or Console(file=StringIO(), width=width, record=True, force_terminal=False)
    title = f"{results.submission}  [{results.backend} backend]"
    grid = Table(title=title, show_lines=False, expand=False)
    grid.add_column("test", overflow="fold")
    grid.add_column("stage", justify="right")
    grid.add_column("score", justify="right")
    grid.add_column("result", overflow="fold")
    for exercise in results.exercises():
        stages = sorted({t.stage for t in results.tests if t.exercise == exercise})
        for stage in stages:
            for t in (t for t in results.tests if t.exercise == exercise and t.stage == stage):
                mark = Text("ok", style="green") if t.status == Status.PASSED else Text(first_line(t.output) or "failed",
                                                                                     style="red")
                grid.add_row(Text(t.name), str(t.stage), f"{_num(t.score)}/{_num(t.max_score)}", mark)
            got, out_of = results.subtotal(exercise, stage)
            grid.add_row(Text(f"{exercise} stage {stage}", style="bold"), "", Text(f"{_num(got)}/{_num(out_of)}",
                                                                                 style="bold"), "", end_section=True)
    console.print(grid)
    console.print(f"Total: {_num(results.score)}/{_num(results.max_score)}  ({results.backend} backend, {results.execution_time:.1f} s)")
    for error in results.errors:
        console.print(Text(f"grader error: {first_line(error)}", style="bold red"))
    return console.export_text() if console.record else ""


def first_failure(results: Results) -> str:
    """The student loop's next step: the first failing test with its whole message, and the
    distinct simulator findings (race, out of bounds, ... with kernel, file and line) of all."""
    failed = [t for t in results.tests if t.status == Status.FAILED]
    if not failed:
        return ""
    first = failed[0]
    lines = [f"First failing test: {first.name} (stage {first.stage})"]
    lines += ["  " + line for line in first.output.strip().splitlines()[:40]]
    findings = list(dict.fromkeys(first_line(t.finding["message"]) for t in failed if t.finding))
    if findings:
        lines.append("Simulator findings:")
        lines += [f"  - {f}" for f in findings[:8]]
    return "\n".join(lines)


def gradescope(results: Results) -> dict:
    """Gradescope's results.json. `score` is given explicitly as the sum of the tests."""
    doc = {
        "score": results.score,
        "execution_time": results.execution_time,
        "output": f"Graded on the {results.backend} backend.",
        "output_format": "text",
        "test_output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": [
            {"score": t.score, "max_score": t.max_score, "status": t.status, "name": t.name,
             "name_format": "text", "number": f"{t.exercise}.{t.stage}.{i + 1}", "output": t.output,
             "output_format": "text", "tags": [t.exercise, f"stage {t.stage}", *t.tags],
             "visibility": t.visibility}
            for i, t in enumerate(results.tests)
        ],
    }
    if results.errors:
        doc["output"] += "\nThe autograder hit an internal error; your instructor has been told:\n" + "\n".join(
            first_line(e) for e in results.errors)
    return doc


def junit(results: Results) -> str:
    suite = ET.Element("testsuite", name=results.submission, tests=str(len(results.tests)),
                       failures=str(sum(t.status == Status.FAILED for t in results.tests)),
                       errors=str(len(results.errors)), time=str(results.execution_time))
    for t in results.tests:
        case = ET.SubElement(suite, "testcase", classname=t.exercise, name=t.name, time="0")
        ET.SubElement(case, "properties").extend([
            ET.Element("property", name="score", value=_num(t.score)),
            ET.Element("property", name="max_score", value=_num(t.max_score)),
            ET.Element("property", name="stage", value=str(t.stage)),
        ])
        if t.status == Status.FAILED:
            failure = ET.SubElement(case, "failure", message=first_line(t.output))
            failure.text = t.output
    for error in results.errors:
        ET.SubElement(ET.SubElement(suite, "testcase", classname="gpugrade", name="grader"), "error",
                      message=first_line(error)).text = error
    return ET.tostring(ET.ElementTree(suite).getroot(), encoding="unicode", xml_declaration=True)


def prairielearn(results: Results) -> dict:
    """PrairieLearn's external-grader results: score in [0, 1], at most 1 MB in all."""
    budget = PRAIRIELEARN_MAX_BYTES // max(1, 2 * len(results.tests) + 2)
    doc = {
        "gradable": True,
        "score": round(results.score / results.max_score, 6) if results.max_score else 0.0,
        "message": f"{_num(results.score)}/{_num(results.max_score)} on the {results.backend} backend",
        "output": "\n".join(results.errors)[:budget],
        "tests": [{"name": t.name, "description": f"{t.exercise}, stage {t.stage}", "points": t.score,
                   "max_points": t.max_score, "message": first_line(t.output)[:budget], "output": t.output[:budget]}
                  for t in results.tests],
    }
    return doc


def _visible(results: Results) -> tuple[list, int]:
    shown = [t for t in results.tests if t.visibility not in HIDDEN_FROM_STUDENTS]
    return shown, len(results.tests) - len(shown)


def markdown(results: Results) -> str:
    """Student feedback as Markdown; hidden tests are counted, never described."""
    shown, hidden = _visible(results)
    lines = [f"# {results.submission}", "", f"**{_num(sum(t.score for t in shown))}/"
             f"{_num(sum(t.max_score for t in shown))}** on the {results.backend} backend", "",
             "| test | stage | score | result |", "|---|---|---|---|"]
    for t in shown:
        result = "ok" if t.status == Status.PASSED else first_line(t.output).replace("|", "\\|")
        lines.append(f"| `{t.name}` | {t.stage} | {_num(t.score)}/{_num(t.max_score)} | {result} |")
    if hidden:
        lines += ["", f"{hidden} more test(s) are hidden until after the due date."]
    failures = [t for t in shown if t.status == Status.FAILED and "\n" in t.output.strip()]
    for t in failures:
        lines += ["", f"## {t.name}", "", "```", t.output.strip(), "```"]
    return "\n".join(lines) + "\n"


def html_page(results: Results) -> str:
    """Student feedback as one self-contained HTML page; hidden tests are counted, never described."""
    shown, hidden = _visible(results)
    esc = html.escape
    rows = "".join(
        f"<tr class='{t.status}'><td><code>{esc(t.name)}</code></td><td>{t.stage}</td>"
        f"<td>{_num(t.score)}/{_num(t.max_score)}</td>"
        f"<td>{'ok' if t.status == 'passed' else '<pre>' + esc(t.output.strip()) + '</pre>'}</td></tr>"
        for t in shown)
    note = f"<p>{hidden} more test(s) are hidden until after the due date.</p>" if hidden else ""
    return ("<!doctype html><html><head><meta charset='utf-8'><title>" + esc(results.submission) + "</title>"
            "<style>body{font-family:sans-serif}td,th{border:1px solid #ccc;padding:4px;vertical-align:top}"
            "table{border-collapse:collapse}.failed td:nth-child(3){color:#b00}.passed td:nth-child(3){color:#070}"
            "pre{margin:0;white-space:pre-wrap}</style></head><body>"
            f"<h1>{esc(results.submission)}</h1><p><b>{_num(sum(t.score for t in shown))}/"
            f"{_num(sum(t.max_score for t in shown))}</b> on the {esc(results.backend)} backend</p>"
            "<table><tr><th>test</th><th>stage</th><th>score</th><th>result</th></tr>" + rows + "</table>"
            + note + "</body></html>\n")


def render(results: Results, fmt: str) -> str:
    if fmt == "table":
        return table(results)
    if fmt == "gradescope":
        return json.dumps(gradescope(results), indent=1)
    if fmt == "prairielearn":
        return json.dumps(prairielearn(results), indent=1)
    if fmt == "junit":
        return junit(results)
    if fmt == "markdown":
        return markdown(results)
    if fmt == "html":
        return html_page(results)
    if fmt == "json":
        return json.dumps(results.to_dict(), indent=1)
    raise ValueError(f"unknown format {fmt!r}")
