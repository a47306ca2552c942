"""Compiled element accesses for the per-thread executor.

The per-thread executor runs a kernel's own code once per CUDA thread, so an element access is
its hot path, and through `ThreadArray.__getitem__` one costs a method call, a frame lookup and
a recorder call. Where numba's types say a subscript is a full index of an array local (every
index an integer, none with side effects), the typed rewrite (`thread_typing`) compiles the
access inline instead:

    A[i, j]        ->  (A_st[F] if 0 <= (I0 := i) < A_d0 and 0 <= (I1 := j) < A_d1
                            and not A_log(LINE << 49 + A_hl + (F := A_o + I0*A_s0 + I1*A_s1))
                        else A[i, j])
    A[i, j] = v    ->  V = v
                       if A_w and 0 <= (I0 := i) < A_d0 and 0 <= (I1 := j) < A_d1:
                           F = A_o + I0*A_s0 + I1*A_s1; A_log(LINE << 49 + A_hs + F)
                           A_st[F] = V; progress
                       else: A[i, j] = V

(a name or a constant index is used as is, and the last stride of an array numba types as
C-contiguous is 1). `A_*` are locals unpacked from the array (`ThreadExecutor.unpack`) at
entry and wherever the name is bound again; `A_log` appends a packed entry to the running
thread's own log,
which `Instrument.flush` turns into requests, sectors and wavefronts when the block ends (local
and constant arrays log to a sink). Anything else (an index out of bounds, an array the fast
path does not cover) takes the original subscript, which checks, reports and records as before;
the index is evaluated again there, which is why only side-effect-free indices are compiled.

This path is used when the race and uninitialised-read checkers are off (counters and bounds
only): those need every access in order, through the recorders.
"""

from __future__ import annotations

import ast
import copy

# a packed log entry: line << 49 | handle code << 32 | flat index
LINE_SHIFT, CODE_SHIFT = 49, 32
MAX_LINE = (1 << (63 - LINE_SHIFT)) - 1
MAX_CODE = (1 << (LINE_SHIFT - CODE_SHIFT)) - 1
MAX_FLAT = (1 << CODE_SHIFT) - 1
LOOP_TICKS = 256  # loop iterations between yields (spin loops must let other threads run)

LOG = "__gg_log"  # the running thread's log (its list's append)
TICK = "__gg_n"  # loop iterations left before the next yield


def fields(name: str, ndim: int) -> list[str]:
    """The locals an array `name` of `ndim` dimensions is unpacked into (`unpack`'s order)."""
    p = f"__gg_a_{name}_"
    return [p + "st", p + "o", *(f"{p}s{k}" for k in range(ndim)),
            *(f"{p}d{k}" for k in range(ndim)), p + "hl", p + "hs", p + "w", p + "log"]


def unbound(ndim: int) -> tuple:
    """What the locals hold before the name is bound: every index fails the bounds test."""
    return (None, 0, *(0,) * ndim, *(0,) * ndim, 0, 0, False, None)


class _Fill(ast.NodeTransformer):
    """Replaces the placeholder names `__gg_e<k>` of a template with index expressions."""

    def __init__(self, exprs):
        self.exprs = exprs

    def visit_Name(self, node):
        if node.id.startswith("__gg_e") and node.id[6:].isdigit():
            return copy.deepcopy(self.exprs[int(node.id[6:])])
        return node


def _parse(source: str, exprs, like) -> list:
    tree = ast.parse(source)
    tree = _Fill(exprs).visit(tree)
    for node in ast.walk(tree):
        if hasattr(node, "lineno") or isinstance(node, (ast.expr, ast.stmt)):
            ast.copy_location(node, like)
            if hasattr(like, "end_lineno"):
                node.end_lineno, node.end_col_offset = like.end_lineno, like.end_col_offset
    return tree.body


def _index(k: int, expr) -> str:
    """Index k as the bounds test reads it: a name or constant as is, else a temporary."""
    return f"__gg_e{k}" if isinstance(expr, (ast.Name, ast.Constant)) else f"(__gg_i{k} := __gg_e{k})"


def _bounds(f: list[str], exprs) -> str:
    n = len(exprs)
    return " and ".join(f"0 <= {_index(k, e)} < {f[2 + n + k]}"
                        for k, e in enumerate(exprs))


def _flat(f: list[str], exprs, contiguous: bool) -> str:
    """The flat position; a C-contiguous array's last stride is 1 (`unpack` makes sure)."""
    n = len(exprs)
    terms = [f[1]]
    for k, e in enumerate(exprs):
        value = f"__gg_e{k}" if isinstance(e, (ast.Name, ast.Constant)) else f"__gg_i{k}"
        terms.append(value if contiguous and k == n - 1 else f"{value} * {f[2 + k]}")
    return " + ".join(terms)


def _subscript(name: str, ndim: int) -> str:
    return f"{name}[{', '.join(f'__gg_e{k}' for k in range(ndim))}]"


def load(name: str, indices: list, contiguous: bool, like) -> ast.expr:
    """The compiled twin of the load `name[indices]` (a `Subscript` node `like`)."""
    ndim = len(indices)
    f = fields(name, ndim)
    key = like.lineno << LINE_SHIFT
    src = (f"({f[0]}[__gg_f] if {_bounds(f, indices)} and not {f[-1]}({key} + {f[-4]} + "
           f"(__gg_f := {_flat(f, indices, contiguous)})) else {_subscript(name, ndim)})")
    return _parse(src, indices, like)[0].value


def store(name: str, indices: list, contiguous: bool, value: ast.expr, like) -> list:
    """The compiled twin of the statement `name[indices] = value` (`like`)."""
    ndim = len(indices)
    f = fields(name, ndim)
    key = like.lineno << LINE_SHIFT
    src = (f"__gg_v = __gg_value\n"
           f"if {f[-2]} and {_bounds(f, indices)}:\n"
           f"    __gg_f = {_flat(f, indices, contiguous)}\n"
           f"    {f[-1]}({key} + {f[-3]} + __gg_f)\n"
           f"    {f[0]}[__gg_f] = __gg_v\n"
           f"    __gg_ex.progress += 1\n"
           f"else:\n"
           f"    {_subscript(name, ndim)} = __gg_v\n")
    stmts = _parse(src, indices, like)
    stmts[0].value = value
    return stmts


def bind(name: str, ndim: int, contiguous: bool, like) -> ast.stmt:
    """`name`'s locals unpacked after the name is bound (at entry, after an assignment)."""
    targets = ", ".join(fields(name, ndim))
    return _parse(f"{targets} = __gg_unpack({name}, {LOG}, {ndim}, {contiguous})", [], like)[0]


def unbind(name: str, ndim: int, like) -> ast.stmt:
    """`name`'s locals before the name is bound: every access takes the original path."""
    targets = ", ".join(fields(name, ndim))
    return _parse(f"{targets} = __gg_unbound[{ndim}]", [], like)[0]


def preamble(has_while: bool, has_accesses: bool, like) -> list:
    src = ""
    if has_accesses:
        src += f"{LOG} = __gg_thread_log()\n"
    if has_while:
        src += f"{TICK} = {LOOP_TICKS}\n"
    return _parse(src, [], like) if src else []


def tick(like) -> list:
    """At the top of a `while` body: every LOOP_TICKS iterations the thread yields, so a spin
    loop lets the thread it waits for run (and a loop that never ends is reported). A `for`
    loop ends by itself."""
    return _parse(f"{TICK} -= 1\nif not {TICK}:\n    {TICK} = {LOOP_TICKS}\n    __gg_spin()\n",
                  [], like)


_PURE = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Attribute, ast.operator,
         ast.unaryop, ast.expr_context)


def pure(node: ast.expr) -> bool:
    """No side effects, so evaluating it twice is harmless: names, constants, arithmetic,
    attributes (`cuda.threadIdx.x`) and constant subscripts of attributes (`A.shape[0]`)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Subscript):
            if not (isinstance(sub.value, ast.Attribute) and isinstance(sub.slice, ast.Constant)):
                return False
        elif not isinstance(sub, _PURE):
            return False
    return True
