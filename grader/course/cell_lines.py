"""A notebook's grade told in the notebook's own places, never in the module the student never sees.

A notebook is graded as the module of its code cells (grader.course.notebooks.module_source), each
under a `# %% (cell N)` marker. Everything the judge says names that module's lines: a finding at
`vector_add.py:53`, a traceback's `File "vector_add.py", line 53`, a hotspot `at line 53 of kernel
...`, a policy refusal `(vector_add.py:53)`. `retell` rewrites them, once, where the results come
back to the grader that knows which file was graded (grader.grading): `vector_add.ipynb, cell 4,
line 3`. The map comes from the module text alone: its cell markers, and the lines the grader
wrote around a cell's top-level scratch (grader.course.scratch), which count as no cell's.

Words: a `<module>.py:N` or `File "<module>.py", line N` names the file, so it is rewritten for
any notebook-graded module; a bare `line N` / `lines N and M` is the test's own exercise's (the
judge names a kernel's lines so). A line in no cell (the stand-in module of a refused notebook) is
told as the notebook alone. What the kernels printed (grader.judge.printed) stays as printed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..judge.printed import MARK as KERNEL_OUTPUT
from ..report.results import Results, TestResult
from .notebooks import CELL_MARKER
from .scratch import INSERTED


@dataclass(frozen=True)
class CellLines:
    """Where each line of a notebook's module came from: `cells` holds, per cell, (its first
    module line, its last module line, its cell number)."""

    module: str  # "vector_add.py", the module graded
    notebook: str  # "vector_add.ipynb", the student's file
    cells: tuple[tuple[int, int, int], ...]
    inserted: frozenset[int] = frozenset()  # the module lines the grader wrote (grader.course.scratch)

    @classmethod
    def of(cls, module: str, notebook: str, text: str) -> "CellLines":
        lines = text.splitlines()
        starts = [(number + 1, int(m.group(1))) for number, line in enumerate(lines, start=1)
                  if (m := CELL_MARKER.fullmatch(line))]
        cells = []
        for (first, cell), (following, _) in zip(starts, [*starts[1:], (len(lines) + 3, 0)]):
            cells.append((first, following - 3, cell))  # a blank line, then the next cell's marker
        inserted = frozenset(number for number, line in enumerate(lines, start=1) if line.endswith(INSERTED))
        return cls(module, notebook, tuple(cells), inserted)

    def where(self, line: int) -> tuple[int, int] | None:
        """(cell, line in the cell) of a module line, or None for a line in no cell (or the grader's)."""
        if line in self.inserted:
            return None
        for first, last, cell in self.cells:
            if first <= line <= last:
                return cell, line - first + 1 - sum(first <= n < line for n in self.inserted)
        return None

    def place(self, line: int) -> str:
        """`vector_add.ipynb, cell 4, line 3`: the notebook's words for `<module>:<line>`."""
        found = self.where(line)
        return f"{self.notebook}, cell {found[0]}, line {found[1]}" if found else self.notebook

    def in_cell(self, line: int) -> str:
        """`cell 4, line 3`, for a message's bare `line N` (the line itself where it is in no cell)."""
        found = self.where(line)
        return f"cell {found[0]}, line {found[1]}" if found else f"line {line}"


_FILE_LINE = re.compile(r'File "(?P<tb>[^"\n]+)", line (?P<tbline>\d+)'
                        r'|(?<![\w./-])(?P<file>[\w.-]+\.py):(?P<line>\d+)'
                        r'|(?<![\w./-])(?P<bare>[\w.-]+\.py)(?![\w:])'
                        r'|\b(?P<word>lines?) (?P<a>\d+)(?: and (?P<b>\d+))?\b')


def retell(results: Results, notebooks: dict[str, CellLines]) -> None:
    """Every test's message, finding, source excerpt and request in the notebooks' own places
    (`notebooks`: exercise -> its map, for each exercise graded from a notebook)."""
    if not notebooks:
        return
    by_module = {lines.module: lines for lines in notebooks.values()}
    results.tests = [_retold(test, by_module, notebooks.get(test.exercise)) for test in results.tests]
    results.notes = [retell_text(note, by_module, None) for note in results.notes]


def _retold(test: TestResult, by_module: dict[str, CellLines], own: CellLines | None) -> TestResult:
    changes: dict = {"output": retell_text(test.output, by_module, own)}
    finding = test.finding
    cells = by_module.get(finding.file or "") if finding is not None else None
    if finding is not None:
        found = cells.where(finding.line) if cells and finding.line else None
        changes["finding"] = replace(
            finding, message=retell_text(finding.message, by_module, own),
            **({"file": f"{cells.notebook}, cell {found[0]}", "line": found[1]} if found else
               {"file": cells.notebook} if cells else {}))
        if test.source and found:
            changes["source"] = _excerpt(cells, test.source, found[0])
        elif cells:
            changes["source"] = None  # lines of no cell: nothing of the student's to show
    if test.request and own and isinstance(test.request.get("line"), int):
        found = own.where(test.request["line"])
        if found:
            changes["request"] = {**test.request, "cell": found[0], "line": found[1]}
    return replace(test, **changes)


def retell_text(text: str, by_module: dict[str, CellLines], own: CellLines | None) -> str:
    """`text` with each module line of a notebook told as the notebook's cell and line."""
    def told(match: re.Match) -> str:
        if match.group("tb"):
            cells = by_module.get(match.group("tb"))
            if not cells:
                return match.group()
            found = cells.where(int(match.group("tbline")))
            return f'File "{cells.notebook}", cell {found[0]}, line {found[1]}' if found else \
                f'File "{cells.notebook}"'
        if match.group("file"):
            cells = by_module.get(match.group("file"))
            return cells.place(int(match.group("line"))) if cells else match.group()
        if match.group("bare"):  # "importing vector_add.py timed out", "vector_add.py has no function ..."
            cells = by_module.get(match.group("bare"))
            return cells.notebook if cells else match.group()
        if own is None:
            return match.group()
        a, b = int(match.group("a")), match.group("b")
        if b is None:
            return own.in_cell(a)
        where_a, where_b = own.where(a), own.where(int(b))
        if where_a and where_b and where_a[0] == where_b[0]:
            return f"lines {where_a[1]} and {where_b[1]} of cell {where_a[0]}"
        return f"{own.in_cell(a)} and {own.in_cell(int(b))}"

    # (what the kernels printed is the student's text, shown as printed)
    return "\n".join(line if line.startswith(KERNEL_OUTPUT) else _FILE_LINE.sub(told, line)
                      for line in text.split("\n"))


def _excerpt(cells: CellLines, source: list, cell: int) -> list | None:
    first, texts = source
    kept = [(cells.where(first + k), text) for k, text in enumerate(texts)]
    kept = [(where, text) for where, text in kept if where and where[0] == cell]
    return [kept[0][0][1], [text for _, text in kept]] if kept else None
