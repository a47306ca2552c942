"""Syntax-tree helpers shared by the simulator's front ends.

Two front ends rewrite a kernel's source: the SIMT executor's transform (`simt/transform.py`,
lane vectors in lockstep) and the per-thread executor's typed rewrite (`thread/rewrite.py`,
one thread's scalars); `kernel_source.marked_code` recompiles a function with an end marker.
What they all need the same way lives here: the function's tree with the line numbers of its
file (so tracebacks and findings point at the student's lines), compiling it back under the
original file name, and the small classifications of nodes.
"""

from __future__ import annotations

import ast
import inspect
import operator
import textwrap

# nested scopes: a function inside the kernel, a lambda, a class
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
# the operators numba types as calls of these functions (no `@`, no chained or `in` compares)
BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
}
COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
           ast.GtE: operator.ge, ast.Eq: operator.eq, ast.NotEq: operator.ne}
UNARY = {ast.USub: operator.neg, ast.Invert: operator.invert}


def parse_function(func) -> tuple[ast.Module, int]:
    """(the module tree of `func`'s source, dedented, its line numbers those of the file; the
    first line). Raises OSError or TypeError when there is no source, SyntaxError when it
    does not parse on its own (a lambda inside an expression). A kernel numba-cuda generated
    (a CUDA ufunc's stager) has the source `generated_source` finds again."""
    try:
        lines, first = inspect.getsourcelines(func)
    except (OSError, TypeError):
        from .generated_source import source_of

        source = source_of(func)
        if source is None:
            raise
        tree = ast.parse(source)
        return tree, func.__code__.co_firstlineno
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)
    return tree, first


def append_return(fdef: ast.FunctionDef, name: str) -> None:
    """Append `return <name>` to the body, on its last line (what running off the end hits)."""
    last = fdef.body[-1]
    ret = ast.Return(name_node(name))
    ast.copy_location(ret, last)
    ret.lineno = ret.value.lineno = getattr(last, "end_lineno", None) or last.lineno
    ast.copy_location(ret.value, ret)
    fdef.body.append(ret)


def define(tree: ast.Module, filename: str, name: str, namespace: dict | None = None):
    """The function `name` that `tree` defines, compiled under `filename` (the student's file:
    tracebacks land on their lines) with `namespace` as its globals."""
    namespace = {} if namespace is None else namespace
    exec(compile(tree, filename, "exec"), namespace)
    return namespace[name]


def arguments(names=()) -> ast.arguments:
    """The parameter list of plain positional parameters `names`."""
    return ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names], vararg=None,
                         kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])


def name_node(id_: str, store: bool = False) -> ast.Name:
    return ast.Name(id_, ast.Store() if store else ast.Load())


def stored_names(node) -> set[str]:
    """The names bound (or deleted) anywhere in `node`."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and
            not isinstance(n.ctx, ast.Load)}


def index_parts(subscript: ast.Subscript) -> list:
    """The index expressions of `a[i, j]` ([i, j]) or `a[i]` ([i])."""
    index = subscript.slice
    return index.elts if isinstance(index, ast.Tuple) else [index]
