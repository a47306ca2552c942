"""Results rendered for people and for other systems: terminal table, Gradescope, JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from io import StringIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .results import Results

FORMATS = ("table", "gradescope", "junit", "json")


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
                mark = Text("ok", style="green") if t.status == "passed" else Text(first_line(t.output) or "failed",
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
    failed = [t for t in results.tests if t.status == "failed"]
    if not failed:
        return ""
    first = failed[0]
    lines = [f"First failing test: {first.name} (stage {first.stage})"]
    lines += ["  " + line for line in first.output.strip().splitlines()[:40]]
    findings = list(dict.fromkeys(first_line(t.output) for t in failed if first_line(t.output).startswith("kernel '")))
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
                       failures=str(sum(t.status == "failed" for t in results.tests)),
                       errors=str(len(results.errors)), time=str(results.execution_time))
    for t in results.tests:
        case = ET.SubElement(suite, "testcase", classname=t.exercise, name=t.name, time="0")
        ET.SubElement(case, "properties").extend([
            ET.Element("property", name="score", value=_num(t.score)),
            ET.Element("property", name="max_score", value=_num(t.max_score)),
            ET.Element("property", name="stage", value=str(t.stage)),
        ])
        if t.status == "failed":
            failure = ET.SubElement(case, "failure", message=first_line(t.output))
            failure.text = t.output
    for error in results.errors:
        ET.SubElement(ET.SubElement(suite, "testcase", classname="gpugrade", name="grader"), "error",
                      message=first_line(error)).text = error
    return ET.tostring(ET.ElementTree(suite).getroot(), encoding="unicode", xml_declaration=True)


def render(results: Results, fmt: str) -> str:
    if fmt == "table":
        return table(results)
    if fmt == "gradescope":
        return json.dumps(gradescope(results), indent=1)
    if fmt == "junit":
        return junit(results)
    if fmt == "json":
        return json.dumps(results.to_dict(), indent=1)
    raise ValueError(f"unknown format {fmt!r}")
