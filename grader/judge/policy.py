"""Static policy check of a student module, before any of it runs.

The AST is read, never executed. Imports outside an allowlist, escape hatches into the
interpreter (`ctypes`, `gc`, `inspect`, `sys.modules`, `__import__`, `globals()`, dunder
attributes such as `__globals__` or `__subclasses__`), file and network I/O, and grader internals
are refused, each with its file and line. A course may widen the allowlist.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ALLOWED_IMPORTS = frozenset({
    "numba", "numpy", "math", "cmath", "functools", "itertools", "operator", "typing", "dataclasses",
    "__future__", "enum", "collections", "warnings",
})
# Builtins that reach the interpreter's machinery or the file system.
FORBIDDEN_CALLS = frozenset({
    "__import__", "globals", "locals", "vars", "open", "exec", "eval", "compile", "breakpoint", "input",
    "getattr", "setattr", "delattr", "memoryview",
})
# Dunder attributes that are fine to touch; every other one is an escape hatch.
ALLOWED_DUNDERS = frozenset({"__init__", "__name__", "__doc__", "__len__", "__call__", "__class__"})
FORBIDDEN_NAMES = frozenset({"__builtins__", "__loader__", "__spec__"})
# what to do instead, for the imports students reach for while trying their kernels
_TIMING = (": the grader times your kernels itself; remove it (to time them yourself, use CUDA events in a "
           "script of your own, run with `gpugrade run`)")
IMPORT_ADVICE = {
    "time": _TIMING, "timeit": _TIMING,
    "os": ": a graded module may not reach the system; remove it",
    "sys": ": a graded module may not reach the interpreter; remove it",
    "grader": ": the grader's own modules are not for graded code (grader.ranks is for scripts under `gpugrade run`)",
}


@dataclass(frozen=True)
class Violation:
    filename: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"policy: {self.what} ({self.filename}:{self.line})"


class _Checker(ast.NodeVisitor):
    def __init__(self, filename: str, allowed_imports: frozenset[str]):
        self.filename = filename
        self.allowed = allowed_imports
        self.found: list[Violation] = []

    def _flag(self, node: ast.AST, what: str) -> None:
        self.found.append(Violation(self.filename, getattr(node, "lineno", 0), what))

    def _check_module(self, node: ast.AST, module: str) -> None:
        top = module.split(".")[0]
        if top == "grader" or top not in self.allowed:
            allowed = ", ".join(sorted(self.allowed - {"__future__"}))
            self._flag(node, f"imports {module}" + IMPORT_ADVICE.get(
                top, f": graded code may import only {allowed}; remove it (plots and other tries belong in a "
                     f"script of your own, which imports your module: `gpugrade run try.py`)"))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self._flag(node, "uses a relative import")
        else:
            self._check_module(node, node.module or "")

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            self._flag(node, f"calls {node.func.id}()")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in ALLOWED_DUNDERS:
            self._flag(node, f"uses the attribute {node.attr}")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_NAMES:
            self._flag(node, f"uses {node.id}")

    def visit_Global(self, node: ast.Global) -> None:
        pass  # rebinding its own module globals is the student's business


def check_source(source: str, filename: str, allowed_imports: frozenset[str] = DEFAULT_ALLOWED_IMPORTS
                 ) -> list[Violation]:
    """Every violation in `source`; a syntax error is left to the import, which names the line."""
    try:
        tree = ast.parse(source, filename)
    except SyntaxError:
        return []
    return check_node(tree, filename, allowed_imports)


def check_node(node: ast.AST, filename: str, allowed_imports: frozenset[str] = DEFAULT_ALLOWED_IMPORTS
               ) -> list[Violation]:
    """Every violation in one parsed statement (or module)."""
    checker = _Checker(filename, frozenset(allowed_imports))
    checker.visit(node)
    return checker.found


def check_file(path: Path, allowed_imports: frozenset[str] = DEFAULT_ALLOWED_IMPORTS) -> list[Violation]:
    return check_source(path.read_text(errors="replace"), path.name, allowed_imports)
