"""The names of an exercise function's parameters, as the course declares them: read from a
trusted file (the reference solution, or the released stub), never from the student's module or
process, whose signature may differ. Messages name the call's arguments by them ("`y` was never
copied to the GPU during saxpy_inplace(alpha, x, y)"); nothing graded reads them."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


def declared_parameters(path: Path | None, function: str) -> tuple[str, ...]:
    """The positional parameters of the module-level `function` in `path`, in order; () where
    there is no such file or function, or the file does not parse."""
    if path is None:
        return ()
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return ()
    return _functions(str(path), stamp).get(function, ())


@functools.lru_cache(maxsize=32)
def _functions(path: str, stamp: int) -> dict[str, tuple[str, ...]]:
    """Every module-level function of the file at `path` (as of `stamp`) -> its positional
    parameters' names."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    return {node.name: tuple(a.arg for a in node.args.posonlyargs + node.args.args)
            for node in tree.body if isinstance(node, ast.FunctionDef)}


def labels(function: str, parameters: tuple[str, ...], positions: list[int]) -> tuple[list[str], str]:
    """How messages name the arguments at `positions` of a call of `function` ("`y`"; "argument
    3" past the declared ones), and the call itself ("saxpy_inplace(alpha, x, y)"; "the call"
    without a declaration)."""
    names = [f"`{parameters[i]}`" if i < len(parameters) else f"argument {i + 1}" for i in positions]
    return names, f"{function}({', '.join(parameters)})" if parameters else "the call"
