"""A notebook's scratch: the top-level code that tries the exercise rather than defines it, graded so
that it costs nothing.

A notebook is graded as the module of its code cells (grader.course.notebooks), and importing a
module runs its top level. Notebook users leave code there that the module graded cannot run, or
should not: `print(t.best)` after a `t = %timeit -o` line that was left out, `display(x)`
(IPython's), a plot, `import time`, a benchmark of their kernel on 2^25 elements (minutes on the
simulator), a try of a stage whose loop never ends. A `.py` guards such code with `if __name__ ==
"__main__"`; a notebook has no such place, and one such line zeroed every test of the exercise. So,
in a notebook's module (never a `.py`'s), outside every def and class (`Scratch.cell`):
- a statement that calls the notebook's own functions or kernels (or uses what such a statement
  would have set) is not run: the tests call those functions themselves, each within its own
  time limit, and a try at import would spend the exercise's time, or hang, before any test. One
  that binds a name a def or class reads (`THREADS_PER_BLOCK = round_to_warp(250)`, `GRID =
  grid_blocks()`) runs, guarded, as it would in a `.py`: the graded functions need it;
- a statement the static policy refuses (`import matplotlib.pyplot as plt`, `open(...)`) is left
  out, unless a def or class uses what it binds (`import time` for a host function that times
  itself): then the policy refuses the module, naming it, as it would a `.py`;
- every other statement that could fail (anything but an import or a constant) runs on its own
  inside `try`: what it raises goes to the module's `FAILED` list, which the runner tells as a note
  (grader.runner.serve), not as a module that does not import. It still binds what it binds, as in
  Jupyter, so a kernel reading a table a loop filled gets it;
- `from __future__` imports move to the module's top, where Python wants them.
Each is said in a note at its cell and line. The lines the grader writes end with `INSERTED`, so
that the module's other lines still lead back to the cell's (grader.course.cell_lines): a statement
is indented, never moved, and the lines inside a string of several lines are not indented at all.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass, field

from ..judge.policy import check_node

FAILED = "_gpugrade_failed"  # the module's list of what its guarded statements raised at import
# the module's {name: "cell N: `code`"} of the names only a line left out or not run would have set,
# so that a NameError of one says why (grader.runner.serve)
UNSET = "_gpugrade_unset"
INSERTED = "# (gpugrade)"  # ends every line the grader adds to a notebook's module
PROLOGUE = f"{FAILED} = []  {INSERTED}"
_OPEN = f"try:  {INSERTED}"
_CLOSE = [f"except (Exception, SystemExit) as _gpugrade_error:  {INSERTED}",
          f"    {FAILED}.append(_gpugrade_error)  {INSERTED}"]
_INDENT = "    "
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
LEFT_OUT = "left out of the module graded (a notebook's top-level code the grader may not run)"
NOT_RUN = ("not run as the notebook is graded: the tests call the notebook's functions themselves (a try at "
           "import would spend the exercise's time before any test)")


@dataclass
class Scratch:
    """A notebook's top level, cell by cell. `defined`: the cells defining each of the notebook's
    own functions and classes; `used_in_defs`: the global names their bodies read (a function's
    own locals and parameters are not: `out = vector_add(a, b)` at the top level is a try, though
    vector_add has an `out` of its own)."""

    name: str  # the notebook's file name, for notes
    allowed_imports: frozenset[str]
    defined: dict[str, list[int]]
    used_in_defs: frozenset[str]
    futures: list[str] = field(default_factory=list)  # the `from __future__` imports, moved to the top
    guarded: bool = False  # whether any statement runs guarded (the module then needs `PROLOGUE`)
    # the names only a statement left out or not run would have set, each with that statement (its cell and code)
    _unset: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, cells: list[tuple[int, str]], allowed_imports: frozenset[str]) -> "Scratch":
        """The notebook `name` whose code cells (number, valid Python) are `cells`."""
        defined: dict[str, list[int]] = {}
        used: set[str] = set()
        for number, source in cells:
            for node in ast.parse(source).body:
                if isinstance(node, _DEFINITIONS):
                    defined.setdefault(node.name, []).append(number)
                    used.update(_globals_read(node))
        return cls(name, allowed_imports, defined, frozenset(used))

    def redefined(self) -> list[str]:
        """Notes of the functions and classes defined in more than one cell: the last one is graded,
        as when the notebook runs top to bottom."""
        return [f"{self.name}: {function} is defined in cells {', '.join(map(str, numbers[:-1]))} and {numbers[-1]}: "
                f"the last is graded, as when the notebook runs from top to bottom"
                for function, numbers in self.defined.items() if len(set(numbers)) > 1]

    def head(self) -> str:
        """The lines the module starts with: the moved `from __future__` imports, then `PROLOGUE`."""
        lines = [f"{line}  {INSERTED}" for line in dict.fromkeys(self.futures)] + ([PROLOGUE] if self.guarded else [])
        if self._unset:
            lines.append(f"{UNSET} = {dict(sorted(self._unset.items()))!r}  {INSERTED}")
        return "".join(line + "\n" for line in lines)

    def cell(self, source: str, number: int) -> tuple[str, list[str]]:
        """Code cell `number` as the module graded runs it: (its source, notes of what was left out)."""
        text, notes, guarded, unset, futures = self._cell(source, number, indent=True)
        try:
            ast.parse(text)
        except SyntaxError:  # (indenting a corner of the cell's text broke it: run it as it is, unguarded)
            text, notes, guarded, unset, futures = self._cell(source, number, indent=False)
        self.guarded = self.guarded or guarded
        self._unset = unset
        self.futures += futures
        return text, notes

    def _cell(self, source: str, number: int, indent: bool) -> tuple[str, list[str], bool, dict[str, str], list[str]]:
        """(the cell's text, its notes, whether any of it runs guarded, the names left unset after
        it, its `from __future__` imports): what `cell` keeps, computed without keeping it."""
        lines = source.splitlines()
        futures: list[str] = []
        inside = _string_continuations(source)
        out: list[str] = []
        notes: list[str] = []
        not_run: list[tuple[int, set[str], set[str]]] = []  # (line, the notebook's functions called, names unset)
        unset, guarded, row = dict(self._unset), False, 1
        for first, last, statements in _units(ast.parse(source).body):
            out += lines[row - 1:first - 1]  # comments and blank lines
            unit = lines[first - 1:last]
            row = last + 1
            bound = {n for s in statements for n in _bound(s)}
            if any(isinstance(s, _DEFINITIONS) for s in statements):
                out += unit
                _forget(unset, bound)
                continue
            if all(isinstance(s, ast.ImportFrom) and s.module == "__future__" for s in statements):
                futures += [ast.unparse(s) for s in statements]
                out += _left_out(unit, "(moved to the top)")
                continue
            refused = [v for s in statements for v in check_node(s, self.name, self.allowed_imports)]
            if refused and not (all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in statements)
                                and bound & self.used_in_defs):
                why = "; ".join(dict.fromkeys(v.what.split(": ")[0] for v in refused))
                notes.append(f"{self.name}, cell {number}, line {first}: `{unit[0].strip()[:60]}` is {LEFT_OUT}: {why}")
                out += _left_out(unit, "(left out)")
                _leave_unset(unset, bound, _where(number, unit))
                continue
            calls = {n for s in statements for n in _called(s)} & self.defined.keys()
            reads = {n.id for s in statements for n in ast.walk(s) if isinstance(n, ast.Name)
                     and isinstance(n.ctx, ast.Load)} & set(unset)
            # (a constant a def reads, made by a function of the notebook's: `TPB = round_to_warp(250)`,
            # `GRID = grid_blocks()`, runs, guarded, as in a .py: left out, every test failed on its name)
            if calls and not reads and bound & self.used_in_defs:
                calls = set()
            if calls or reads:
                not_run.append((first, calls, reads))
                out += _left_out(unit, "(not run)")
                _leave_unset(unset, bound, _where(number, unit))
                continue
            _forget(unset, bound)
            if refused or all(map(_cannot_fail, statements)) or not indent:
                out += unit
                continue
            guarded = True
            out += [_OPEN] + [line if k + first in inside or not line.strip() else _INDENT + line
                              for k, line in enumerate(unit)] + _CLOSE
        out += lines[row - 1:]
        if not_run:
            called = sorted(set().union(*(c for _, c, _ in not_run)))
            unset_read = sorted(set().union(*(r for _, _, r in not_run)))
            lines_said = ", ".join(str(line) for line, _, _ in not_run)
            what = ([f"they call {', '.join(called)}"] if called else []) + \
                ([f"they use {', '.join(unset_read)}, which a line left out would have set"] if unset_read else [])
            notes.append(f"{self.name}, cell {number}, line{'s' if len(not_run) > 1 else ''} {lines_said}: "
                         f"{NOT_RUN}; {' and '.join(what)}")
        return "\n".join(out), notes, guarded, unset, futures


def _globals_read(definition: ast.stmt) -> set[str]:
    """The names a def or class reads that it does not bind itself (its parameters, what it assigns,
    imports or defines, unless declared `global`): those a module's top level must set."""
    read, bound, declared = set(), set(), set()
    for node in ast.walk(definition):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Global):
            declared.update(node.names)
        elif isinstance(node, (*_DEFINITIONS, ast.Lambda)) and node is not definition and hasattr(node, "name"):
            bound.add(node.name)
    return read - (bound - declared)


def _where(number: int, unit: list[str]) -> str:
    """A statement's cell and code, for a message: "cell 2: `TPB = int(os.environ['TPB'])`" (its line
    number not as `line N`, which the report would read as one of the module's)."""
    return f"cell {number}: `{unit[0].strip()[:60]}`"


def _leave_unset(unset: dict[str, str], bound: set[str], where: str) -> None:
    """Names a statement left out or not run binds: unset, each with the first statement that would
    have set it."""
    for name in bound:
        unset.setdefault(name, where)


def _forget(unset: dict[str, str], bound: set[str]) -> None:
    """Names a statement that runs binds: set after all."""
    for name in bound:
        unset.pop(name, None)


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


def _left_out(unit: list[str], why: str) -> list[str]:
    """A statement's lines, left out: `pass` on its first, the others blank (line numbers kept)."""
    return [unit[0][:len(unit[0]) - len(unit[0].lstrip())] + f"pass  # {why}"] + [""] * (len(unit) - 1)


def _bound(statement: ast.stmt) -> set[str]:
    """The names a top-level statement binds."""
    names = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        names |= {(a.asname or a.name).split(".")[0] for a in statement.names}
    elif isinstance(statement, _DEFINITIONS):
        names.add(statement.name)
    return names


def _called(statement: ast.stmt) -> set[str]:
    """The names a statement calls: `f(x)`, and `kernel[grid, block](x)`, a kernel's launch."""
    found = set()
    for node in ast.walk(statement):
        if isinstance(node, ast.Call):
            func = node.func.value if isinstance(node.func, ast.Subscript) else node.func
            if isinstance(func, ast.Name):
                found.add(func.id)
    return found


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


def _string_continuations(source: str) -> set[int]:
    """The lines inside a string of several lines, past its first: indenting them would change it."""
    kinds = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    rows: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in kinds and token.end[0] > token.start[0]:
                rows.update(range(token.start[0] + 1, token.end[0] + 1))
    except (tokenize.TokenError, SyntaxError):
        pass  # (it parsed: tokenize's stricter corners only)
    return rows
