"""The terminal: the score table, and the student loop's next step (the first failure)."""

from __future__ import annotations

from io import StringIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .results import Results, Status
from .text import first_line, num, outcome


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
                style = {Status.PASSED: "green", Status.NOT_GRADABLE: "yellow"}.get(t.status, "red")
                mark = Text(outcome(t), style=style)
                grid.add_row(Text(t.name), str(t.stage), f"{num(t.score)}/{num(t.max_score)}", mark)
            got, out_of = results.subtotal(exercise, stage)
            grid.add_row(Text(f"{exercise} stage {stage}", style="bold"), "", Text(f"{num(got)}/{num(out_of)}",
                                                                                 style="bold"), "", end_section=True)
    console.print(grid)
    console.print(f"Total: {num(results.score)}/{num(results.max_score)}  ({results.backend} backend, {results.execution_time:.1f} s)")
    if results.backend_note:
        console.print(f"Note: {results.backend_note}")
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
    findings = list(dict.fromkeys(first_line(t.finding.message) for t in failed if t.finding))
    if findings:
        lines.append("Simulator findings:")
        lines += [f"  - {f}" for f in findings[:8]]
    return "\n".join(lines)
