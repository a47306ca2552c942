"""A notebook's scratch: the top-level code that tries the exercise rather than defines it, graded so
that it costs nothing.

A notebook is graded as the module of its code cells (grader.course.notebooks), and importing a
module runs its top level. Notebook users leave code there that the module graded cannot run:
`print(t.best)` after a `t = %timeit -o` line that was left out, `display(x)` (IPython's), a plot,
a try of their kernel on a size where it fails. A `.py` guards such code with `if __name__ ==
"__main__"`; a notebook has no such place, and one failing line zeroed every test of a correct
exercise. So, in a notebook's module (never a `.py`'s), outside every def and class:
- a statement the static policy refuses (`import matplotlib.pyplot as plt`, `import time`,
  `open(...)`) is left out, as IPython's lines are, with a note naming why; inside a def or class it
  is graded code, refused as in any module;
- each run of statements that could fail (anything but a def, a class, an import or a constant)
  runs inside `try`: what it raises goes to the module's `FAILED` list, which the runner tells as a
  note (grader.runner.serve), not as a module that does not import. The statements still run and
  bind what they bind, as in Jupyter, so a kernel that reads a table filled by a loop still gets it.
The lines the grader writes end with `INSERTED`, so that the module's other lines still lead back
to the cell's (grader.course.cell_lines). A statement is indented, never moved; one holding a string
of several lines is left as it is, since indenting would change the string.
"""

from __future__ import annotations

import ast
import io
import tokenize

from ..judge.policy import check_node

FAILED = "_gpugrade_failed"  # the module's list of what its guarded statements raised at import
INSERTED = "# (gpugrade)"  # ends every line the grader adds to a notebook's module
PROLOGUE = f"{FAILED} = []  {INSERTED} what this notebook's top-level code raised as it was imported"
_OPEN = f"try:  {INSERTED}"
_CLOSE = [f"except Exception as _gpugrade_error:  {INSERTED}", f"    {FAILED}.append(_gpugrade_error)  {INSERTED}"]
_INDENT = "    "
LEFT_OUT = "left out of the module graded (a notebook's top-level code the grader may not run)"


def guard(source: str, name: str, number: int, allowed_imports: frozenset[str]) -> tuple[str, list[str], bool]:
    """A code cell (valid Python) as the module graded runs it: (its source, what was left out, as
    notes; whether any of it runs guarded, which needs `PROLOGUE` at the module's top)."""
    text, notes, guarded = _guard(source, name, number, allowed_imports, indent=True)
    try:
        ast.parse(text)
    except SyntaxError:  # (indenting a corner of the cell's text broke it: run it as it is, unguarded)
        return _guard(source, name, number, allowed_imports, indent=False)
    return text, notes, guarded


def _guard(source: str, name: str, number: int, allowed_imports: frozenset[str], indent: bool
           ) -> tuple[str, list[str], bool]:
    tree = ast.parse(source)
    lines = source.splitlines()
    spanning = _rows_in_strings(source)
    out: list[str] = []
    notes: list[str] = []
    guarded = is_open = False
    row = 1  # the next line of the cell to write
    for first, last, statements in _units(tree.body):
        between = lines[row - 1:first - 1]  # comments and blank lines
        unit = lines[first - 1:last]
        refused = [] if _defines(statements) else [v for s in statements for v in check_node(s, name, allowed_imports)]
        if refused:
            notes.append(f"{name}, cell {number}, line {first}: `{unit[0].strip()[:60]}` is {LEFT_OUT}: "
                         + "; ".join(dict.fromkeys(v.what for v in refused)))
            unit = [unit[0][:len(unit[0]) - len(unit[0].lstrip())] + "pass  # (left out)"] + [""] * (len(unit) - 1)
        guard_it = indent and not refused and not _defines(statements) and not all(map(_cannot_fail, statements)) \
            and not spanning & set(range(first, last + 1))
        if is_open and not guard_it and not refused:
            out += _CLOSE
            is_open = False
        if guard_it and not is_open:
            out += between + [_OPEN]
            between, is_open, guarded = [], True, True
        out += between + ([_INDENT + line if line.strip() else line for line in unit] if is_open else unit)
        row = last + 1
    if is_open:
        out += _CLOSE
    out += lines[row - 1:]
    return "\n".join(out), notes, guarded


def _units(body: list[ast.stmt]) -> list[tuple[int, int, list[ast.stmt]]]:
    """The top-level statements as (first line, last line, statements): a def's decorators are its
    lines, and statements that share a line (`a = 1; print(a)`) are one unit."""
    units: list[tuple[int, int, list[ast.stmt]]] = []
    for statement in body:
        first = min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", []))])
        last = statement.end_lineno or statement.lineno
        if units and first <= units[-1][1]:
            units[-1] = (units[-1][0], max(last, units[-1][1]), [*units[-1][2], statement])
        else:
            units.append((first, last, [statement]))
    return units


def _defines(statements: list[ast.stmt]) -> bool:
    return any(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for s in statements)


def _cannot_fail(statement: ast.stmt) -> bool:
    """An import, `pass`, a bare string, or a name bound to a constant (`TPB = 16`, `N = 1 << 20`)."""
    if isinstance(statement, (ast.Import, ast.ImportFrom, ast.Pass)):
        return True
    if isinstance(statement, ast.Expr):
        return isinstance(statement.value, ast.Constant)
    if isinstance(statement, (ast.Assign, ast.AnnAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return all(isinstance(t, ast.Name) for t in targets) and (statement.value is None or _constant(statement.value))
    return False


def _constant(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(map(_constant, node.elts))
    if isinstance(node, ast.BinOp):  # `1 << 20`, `2 ** 10`
        return _constant(node.left) and _constant(node.right)
    return isinstance(node, ast.UnaryOp) and _constant(node.operand)


def _rows_in_strings(source: str) -> set[int]:
    """The lines a string of several lines spans past its first (indenting them would change it)."""
    kinds = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    rows: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in kinds and token.end[0] > token.start[0]:
                rows.update(range(token.start[0], token.end[0] + 1))
    except (tokenize.TokenError, SyntaxError):
        pass  # (it parsed: tokenize's stricter corners only)
    return rows

