"""Which of a launch's arrays no thread of it can write.

A race needs a write, so the loads of an array that nothing in the launch writes need no race
record; with every element initialised they need no uninitialised-read check either, and take
the counters' fast path (`memory.Instrument.quiet`). Most global loads are such: vector add's
`a` and `b`, matmul's `A` and `B`, the reduction's `x`. Measured, a launch before and after:
vector add over 2^20 floats 113 -> 61 ms; a grid-stride sum of 540,679 floats on 1,056 blocks
0.08 -> 0.06 s, and 8.5 -> 2.4 s when its loop steps by the block (each element read ~1,000 times).

`written_params(func, ndims)` reads the kernel's source, and the device functions it calls, and
answers with the parameters whose arrays the code may write, or None when it cannot tell (then
every array is treated as written). It is flow-insensitive and errs towards "written":
- a parameter's array may reach any name assigned an expression that holds it, or a view of it,
  or such a name (`row = A[i]` of a 2-D `A`, `y = pick(x, out)`); an element (`x[i]` with as many
  indices as a parameter of known `ndims` has dimensions) and `x.shape`, `x.size`... are not;
- the base of a subscript or attribute store (`out[i] = v`, `A[i][j] = v`, `r[i].f = v`) writes
  every name in it; so does an augmented assignment to a name (`x += y` of arrays is in place);
- a call: a cuda atomic writes its first argument; a device function the arguments at the
  positions it writes (the same analysis, recursively); the intrinsics and builtins the lockstep
  executor models write nothing, except a numpy ufunc given an output; any other callee (a
  method, a function passed as a value, a recursive device function) may write all it is given,
  receiver included;
- nested functions, lambdas, comprehensions, `global`, imports, `try`, `match` (bindings this
  does not follow), `*args`, no source: None.

A device function rebound between launches: an answer is kept with the references of every function
it read and the attributes it looked up (`helpers.fn`), and is read again once any of them is
another object; each launch's answer is joined with the earlier ones for the same kernel (`_seen`),
so the function an executor compiled at an earlier launch stays covered. `memory.Instrument` still
refuses a store into an array found read-only, loudly, rather than miss a race.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import threading
import types
import weakref

from .ast_tools import SCOPES, parse_function, stored_names
from .bounded import BoundedCache
from .host import DeviceBuffer, device_buffers
from .kernel_graph import is_numba_dispatcher, references

__all__ = ["written_params", "read_only_buffers"]

_NOT_ANALYSED = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Global, ast.Nonlocal,
                 ast.Match, ast.Import, ast.ImportFrom, ast.Try)
_SILENT_KINDS = frozenset({"ctx", "dim", "value", "builtin", "cast", "math"})
# attributes of an array that are numbers or tuples of numbers, never a view of it
_NUMBER_ATTRIBUTES = frozenset({"shape", "size", "ndim", "strides", "itemsize", "nbytes", "dtype"})
# (function, its arguments' dimensions) -> (each function the answer read, with the references
# it read it with; each attribute it looked up, with what it found; the answer): valid while every
# one of them is the same object
_answers = BoundedCache(512)
_MISSING = object()
# function -> the union of its answers so far (None once any was None)
_seen: "weakref.WeakKeyDictionary[types.FunctionType, frozenset | None]" = weakref.WeakKeyDictionary()
_seen_lock = threading.Lock()


def written_params(func, ndims: dict[str, int] | None = None) -> frozenset[str] | None:
    """The parameters of `func` (a kernel's or device function's Python function) whose arrays
    its code may write, or None when that cannot be told. `ndims`: the dimensions of the arrays
    some parameters are given (an element of one is told from a view by them)."""
    key = (func, tuple(sorted((ndims or {}).items())))
    hit = _answers.get(key)
    if hit is not None and all(_same(references(fn), refs) for fn, refs in hit[0]) and \
            all(_static(base, attr) is found for base, attr, found in hit[1]):
        written = hit[2]
    else:  # (a device function it calls, or one that calls, may have been rebound since)
        reading = _Reading()
        written = reading.written(func, ndims or {})[1]
        _answers[key] = (tuple(reading.analysed), tuple(reading.looked_up), written)
    with _seen_lock:  # (host threads of several GPUs launch at once)
        if func in _seen:
            before = _seen[func]
            written = None if before is None or written is None else before | written
        _seen[func] = written
    return written


def _same(now: dict, then: dict) -> bool:
    return now.keys() == then.keys() and all(now[name] is then[name] for name in now)


def _static(base, attr: str):
    """`base.attr` read statically (no `__getattr__` or property runs), or _MISSING."""
    try:
        return inspect.getattr_static(base, attr)
    except AttributeError:
        return _MISSING


def read_only_buffers(func, params: list[str], bound: list) -> set[int]:
    """The `buffer_id`s of the array arguments in `bound` (DeviceBuffers, possibly inside
    tuples, one per name in `params`) that no thread of a launch of `func` can write: those of
    parameters it never writes, unless a written parameter holds the same allocation."""
    # (an element of a record array is a reference into it: `r = x[i]; r.f = v` writes x)
    ndims = {name: len(value.shape) for name, value in zip(params, bound)
             if isinstance(value, DeviceBuffer) and value.dtype.names is None}
    written = written_params(func, ndims)
    if written is None:
        return set()
    quiet, loud = set(), set()
    for name, value in zip(params, bound):
        (loud if name in written else quiet).update(b.buffer_id for b in device_buffers(value))
    return quiet - loud


class _Reading:
    """One answer of `written_params`: the functions read for it, each once per dimensions."""

    def __init__(self):
        self.analysed: list = []  # (function, its references) of each function read
        self.looked_up: list = []  # (object, attribute, what it was) of each attribute read
        self._answers: dict = {}  # (function, dimensions) -> (parameter names, written)
        self._active: set = set()  # the functions being read up the call chain

    def written(self, func, ndims: dict) -> tuple[list[str] | None, frozenset | None]:
        """(parameter names, written) of `func`; a function met again up its own call chain is a
        recursion: not told."""
        key = (func, tuple(sorted(ndims.items())))
        if key in self._answers:
            return self._answers[key]
        if func in self._active:
            return None, None
        refs = references(func)
        self.analysed.append((func, refs))
        self._active.add(func)
        try:
            hit = self._answers[key] = _analyse(func, ndims, refs, self)
        finally:
            self._active.discard(func)
        return hit


def _analyse(func, ndims: dict, refs: dict, reading: _Reading) -> tuple[list[str] | None, frozenset | None]:
    try:
        tree, _ = parse_function(func)
        from .simt.intrinsics import lookup
    except (OSError, TypeError, SyntaxError, ImportError):
        return None, None
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, ast.FunctionDef) or fdef.name != func.__name__:
        return None, None  # a lambda, or source that is not this function's
    args = fdef.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        return None, None
    params = [a.arg for a in args.args]
    fdef.decorator_list = []  # (`@cuda.jit(...)` is not the function's code)
    if any(node is not fdef and isinstance(node, SCOPES + _NOT_ANALYSED) for node in ast.walk(fdef)):
        return params, None
    local = stored_names(fdef)
    # the dimensions hold for parameters the code never rebinds
    fixed = {name: n for name, n in ndims.items() if name in params and name not in local}
    scope = _Scope(params, local | set(params), fixed, refs, lookup, reading)
    for node in ast.walk(fdef):
        scope.visit(node)
    return params, scope.written()


def _names(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


class _Scope:
    """What one function's statements say: which names flow into which, and which are written."""

    def __init__(self, params, local, ndims, refs, lookup, reading):
        self.params, self.local, self.ndims = params, local, ndims
        self.refs, self.lookup, self.reading = refs, lookup, reading
        self.flows: dict[str, set[str]] = {}  # name -> the names of what was assigned to it
        self.writes: set[str] = set()  # names whose values (and what flowed into them) are written

    def sources(self, node) -> set[str]:
        """The names whose array (or a view of it) `node`'s value may be: every name in it but
        those only read as an element or for a number (`x[i]`, `x.size`)."""
        out, stack = set(), [node]
        while stack:
            n = stack.pop()
            if isinstance(n, ast.Name):
                out.add(n.id)
            elif isinstance(n, ast.Subscript) and self.is_element(n):
                stack.append(n.slice)
            elif not (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                      and n.attr in _NUMBER_ATTRIBUTES):
                stack.extend(ast.iter_child_nodes(n))
        return out

    def is_element(self, node: ast.Subscript) -> bool:
        """`a[i, j]` on a parameter of known dimensions, one index each, no slice."""
        if not isinstance(node.value, ast.Name) or node.value.id not in self.ndims:
            return False
        index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return len(index) == self.ndims[node.value.id] and \
            not any(isinstance(i, (ast.Slice, ast.Starred)) for i in index)

    def bind(self, target, sources: set[str]) -> None:
        for n in ast.walk(target):
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
                self.flows.setdefault(n.id, set()).update(sources)

    def visit(self, node) -> None:
        """Record `node`'s flows and writes."""
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self.bind(target, self.sources(node.value))
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)):
            if node.value is not None:
                self.bind(node.target, self.sources(node.value))
        elif isinstance(node, ast.AugAssign):
            self.bind(node.target, self.sources(node.value) | self.sources(node.target))
            if isinstance(node.target, ast.Name):
                self.writes.add(node.target.id)
        elif isinstance(node, ast.For):
            self.bind(node.target, self.sources(node.iter))
        elif isinstance(node, ast.With):
            for item in node.items:
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, self.sources(item.context_expr))
        elif isinstance(node, (ast.Subscript, ast.Attribute)) and not isinstance(node.ctx, ast.Load):
            self.writes |= _names(node.value)
        elif isinstance(node, ast.Call):
            self.call(node)

    def call(self, node: ast.Call) -> None:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            self.writes |= _names(node)
            return
        callee = self.resolve(node.func)
        hit = self.lookup(callee) if callee is not None else None
        if hit is not None and hit.kind == "atomic":
            self.writes |= _names(node.args[0]) if node.args and not node.keywords else _names(node)
            return
        if hit is not None and hit.kind in _SILENT_KINDS:
            ufunc = hit.payload[0] if hit.kind == "math" and isinstance(hit.payload, tuple) else None
            nin = getattr(ufunc, "nin", None)
            if nin is not None and (len(node.args) > nin or node.keywords):  # an output given
                self.writes |= _names(node)
            return
        if callee is not None and is_numba_dispatcher(callee):
            inner = callee.py_func
            names = _parameters(inner)
            given = {names[k]: arg for k, arg in enumerate(node.args) if k < len(names)}
            given.update((kw.arg, kw.value) for kw in node.keywords)
            ndims = {p: self.ndims[a.id] for p, a in given.items()
                     if isinstance(a, ast.Name) and a.id in self.ndims}
            params, written = self.reading.written(inner, ndims)
            if written is None or len(node.args) > len(params):
                self.writes |= _names(node)
                return
            for name, arg in given.items():
                if name not in params or name in written:
                    self.writes |= _names(arg)
            return
        self.writes |= _names(node)  # not known to leave its arguments alone

    def resolve(self, node):
        """The object a global name or an attribute chain of one refers to; None for locals and
        what is not there. Attributes are read statically: no `__getattr__` or property of the
        student's runs here."""
        if isinstance(node, ast.Name):
            if node.id in self.local:
                return None
            if node.id in self.refs:
                return self.refs[node.id]
            return getattr(builtins, node.id, None)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            if base is None:
                return None
            found = _static(base, node.attr)
            self.reading.looked_up.append((base, node.attr, found))
            return None if found is _MISSING else found
        return None

    def written(self) -> frozenset:
        """The parameters whose arrays reach a written name."""
        reach = {p: {p} for p in self.params}  # parameter -> the names its array may reach
        changed = True
        while changed:
            changed = False
            for name, sources in self.flows.items():
                for names in reach.values():
                    if name not in names and names & sources:
                        names.add(name)
                        changed = True
        return frozenset(p for p, names in reach.items() if names & self.writes)


def _parameters(func) -> list[str]:
    """The names of `func`'s positional parameters, in order."""
    code = func.__code__
    return list(code.co_varnames[:code.co_argcount])
