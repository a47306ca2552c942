"""The terminal: the score table, and the student loop's next step (the first failure)."""

from __future__ import annotations

from io import StringIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .results import CONSEQUENCE, Results, Status
from .text import first_line, grouped, num, outcome


MAX_GROUPS = 3  # distinct failures shown per stage; -v shows every test


def table(results: Results, console: Console | None = None, width: int = 110, verbose: bool = False) -> str:
    """The score table a student or instructor reads: one row per stage, each failure told once
    with the tests it fails (`verbose`: one row per test, subtotals per stage)."""
    console = console or Console(file=StringIO(), width=width, record=True, force_terminal=False)
    if not verbose:
        return _stages(results, console)
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
    return _footer(results, console)


def _stages(results: Results, console: Console) -> str:
    grid = Table(title=f"{results.submission}  [{results.backend} backend]", show_lines=True, expand=False)
    grid.add_column("stage", overflow="fold")
    grid.add_column("score", justify="right")
    grid.add_column("result", overflow="fold")
    for exercise in results.exercises():
        for stage in sorted({t.stage for t in results.tests if t.exercise == exercise}):
            tests = [t for t in results.tests if t.exercise == exercise and t.stage == stage]
            got, out_of = results.subtotal(exercise, stage)
            verdict = stage_verdict(tests)
            style = "green" if got >= out_of and all(t.status == Status.PASSED for t in tests) else \
                "yellow" if all(t.status != Status.FAILED for t in tests) else "red"
            grid.add_row(Text(f"{exercise} stage {stage}", style="bold"), f"{num(got)}/{num(out_of)}",
                         Text(verdict, style=style))
    console.print(grid)
    console.print(f"Total: {num(results.score)}/{num(results.max_score)}  ({results.backend} backend, "
                  f"{results.execution_time:.1f} s; -v for every test)")
    return _footer(results, console)


def stage_verdict(tests: list) -> str:
    """One stage in a few lines: "ok" (with a performance test's time), or each distinct failure
    once with the tests it fails under it; tests not run or not gradable counted after."""
    failed = [t for t in tests if t.failed_itself]
    waiting = [t for t in tests if t.status == Status.FAILED and t.output.startswith(CONSEQUENCE)]
    absent = [t for t in tests if t.status == Status.NOT_GRADABLE]
    lines = []
    ran = len(tests) - len(absent)
    if not failed and ran:
        timed = next((outcome(t) for t in tests if t.status == Status.PASSED and getattr(t, "timing", None)), "")
        lines.append(timed or f"ok ({ran} test{'s' if ran != 1 else ''})")
    groups = grouped(failed)
    for message, members in list(groups.items())[:MAX_GROUPS]:
        names = ", ".join(t.name.split("::", 1)[-1] for t in members[:4]) + (" ..." if len(members) > 4 else "")
        lines.append(f"{message}\n   fails {len(members)} test{'s' if len(members) > 1 else ''}: {names}")
    if len(groups) > MAX_GROUPS:
        lines.append(f"and {len(groups) - MAX_GROUPS} more kinds of failure (-v)")
    if waiting:
        lines.append(f"{len(waiting)} performance test{'s' if len(waiting) > 1 else ''} not run: correctness first")
    if absent:  # (the output says "not gradable on this machine: why")
        lines.append(f"{len(absent)} {first_line(absent[0].output).replace('on this machine', 'here', 1)}")
    return "\n".join(lines)


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


def _footer(results: Results, console: Console) -> str:
    """The notes and grader errors under either table; the text, where the console records it."""
    if results.backend_note:
        console.print(f"Note: {results.backend_note}")
    for note in results.notes:
        console.print(f"Note: {note}")
    for error in results.errors:
        console.print(Text(f"grader error: {first_line(error)}", style="bold red"))
    return console.export_text() if console.record else ""
