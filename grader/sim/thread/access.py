"""Compiled element accesses for the per-thread executor.

The per-thread executor runs a kernel's own code once per CUDA thread, so an element access is
its hot path, and through `ThreadArray.__getitem__` one costs a method call, a frame lookup and
a recorder call. Where numba's types say a subscript is a full index of an array local (every
index an integer, none with side effects), the typed rewrite (`rewrite`) compiles the
access inline instead:

    A[i, j]        ->  (A_st[F] if 0 <= (I0 := i) < A_d0 and 0 <= (I1 := j) < A_d1
                            and not A_l3(F := A_o + I0 * A_s0 + I1 * A_s1)
                        else A[i, j])
    A[i, j] = v    ->  V = v
                       if A_w and 0 <= (I0 := i) < A_d0 and 0 <= (I1 := j) < A_d1:
                           F = A_o + I0 * A_s0 + I1 * A_s1; A_l4(F); A_st[F] = V; progress
                       else: A[i, j] = V

(a name or a constant index is used as is, and the last stride of an array numba types as
C-contiguous is 1). `A_*` are locals unpacked from the array (`AccessLogs.unpack`) at
entry and wherever the name is bound again. Each site (a line and load or store) of an array
logs the flat positions it touches to a list of its own per thread (`A_l<k>`: its append):
the n-th entry of every lane of a warp is one request, as on the recorders' path, and
`Instrument.flush` counts them when the block ends (local and constant arrays log to a sink).
Anything else (an index out of bounds, an array the fast path does not cover) takes the original
subscript, which checks, reports and records as before; the index is evaluated again there,
which is why only side-effect-free indices are compiled.

With the race or uninitialised-read checker on, each compiled access also calls the array's
checker (`Instrument.scalar_checker`) with the thread's id and a `Site` for the frame, before
the element is read or written: the checkers see every access, in order, as on the recorded path.
"""

from __future__ import annotations

import ast
import copy

from .arrays import ThreadArray

# the access logs are counted every this many site lists (compiled accesses) or recorded accesses
FLUSH_SITES, FLUSH_ACCESSES = 16384, 1 << 20
LOOP_TICKS = 256  # loop iterations between yields (spin loops must let other threads run)
TICK = "__gg_n"  # loop iterations left before the next yield


class ArrayAccesses:
    """The compiled accesses of one array local: its sites, and the statements that bind its
    locals (completed by `finish` once every site is known).

    `recording` (the race or uninitialised-read checker on): each access also calls the
    array's checker (`Instrument.scalar_checker`: `check(flat, g, frame, value)`) with the
    thread's id and a `Site` standing for the frame, so the checkers see every access in
    order, as on `ThreadArray`'s path. `site_name(line)`: the global holding that Site."""

    def __init__(self, name: str, ndim: int, contiguous: bool, recording: bool = False,
                 site_name=None):
        self.name, self.ndim, self.contiguous = name, ndim, contiguous
        self.recording, self.site_name = recording, site_name
        self.sites: dict = {}  # (line, is_store) -> number of its log list
        self._binds: list = []  # (statement, unbound) to complete

    def _prefix(self) -> str:
        return f"__gg_a_{self.name}_"

    def fields(self) -> list[str]:
        p, n = self._prefix(), self.ndim
        return [p + "st", p + "o", *(f"{p}s{k}" for k in range(n)),
                *(f"{p}d{k}" for k in range(n)), p + "w"]

    def _extra(self) -> list[str]:
        """The locals after `fields`: the checkers (recording), then one log list per site."""
        checkers = [self._prefix() + "cl", self._prefix() + "cs"] if self.recording else []
        return checkers + [f"{self._prefix()}l{k}" for k in range(len(self.sites))]

    def load_test(self, line: int, flat: str) -> str:
        """The (true) condition that checks and logs a load at `flat` and sets `__gg_f`."""
        log = f"{self._prefix()}l{self.sites.setdefault((line, False), len(self.sites))}"
        if self.recording:
            return (f"not {self._prefix()}cl(__gg_f := {flat}, __gg_g, {self.site_name(line)}) "
                    f"and not {log}(__gg_f)")
        return f"not {log}(__gg_f := {flat})"

    def store_lines(self, line: int) -> str:
        """The statements that check and log a store of `__gg_v` at `__gg_f`."""
        log = f"{self._prefix()}l{self.sites.setdefault((line, True), len(self.sites))}"
        check = (f"{self._prefix()}cs(__gg_f, __gg_g, {self.site_name(line)}, __gg_v)\n"
                 if self.recording else "")
        return f"{check}{log}(__gg_f)\n"

    def bind(self, like, unbound: bool = False) -> ast.stmt:
        """`name`'s locals, unpacked (after the name is bound) or with every index failing
        the bounds test (`unbound`: before it is)."""
        stmt = ast.copy_location(ast.Assign([], ast.Constant(None)), like)
        self._binds.append((stmt, unbound))
        return stmt

    def finish(self) -> None:
        targets = self.fields() + self._extra()
        for stmt, unbound in self._binds:
            if not self.sites:  # nothing compiled reads them
                stmt.targets, stmt.value = [ast.Name("__gg_unused", ast.Store())], ast.Constant(None)
                ast.copy_location(stmt.targets[0], stmt)
                ast.copy_location(stmt.value, stmt)
                continue
            if unbound:
                src = f"{', '.join(targets)} = {unbound_fields(self.ndim, len(self._extra()))!r}"
            else:
                sites = tuple(self.sites)
                src = (f"{', '.join(targets)} = __gg_unpack({self.name}, {self.ndim}, "
                       f"{self.contiguous}, {sites!r}, {self.recording})")
            new = _parse(src, [], stmt)[0]
            stmt.targets, stmt.value = new.targets, new.value


class AccessLogs:
    """The running side of a launch's compiled accesses: what `__gg_unpack` gives an array's
    locals, and the per-thread, per-site log lists, counted in batches of blocks (a count has a
    fixed cost of its own) by `Instrument.flush`. `ex`: the ThreadExecutor (its `cur`, `bid`)."""

    def __init__(self, ex):
        self._ex, self.inst = ex, ex.inst
        self.site_logs: list = []  # (g, line, slot code, log list) of the compiled accesses
        self._sink: list = []  # what local and constant arrays' compiled accesses log

    def unpack(self, ary, ndim: int, contiguous: bool, sites: tuple, checked: bool) -> tuple:
        """The locals the compiled accesses of `ary` read (`ArrayAccesses`): layout; with
        `checked`, the array's load and store checkers (`Instrument.scalar_checker`, called
        with a `Site` for the frame); one fresh log list (its append) per site
        ((line, is_store)), registered for the count. Code compiled for a C-contiguous array
        reads its last stride as 1. An array the fast path does not cover fails every bounds
        test."""
        ex = self._ex
        if ary.__class__ is not ThreadArray or ary.ndim != ndim or \
                contiguous and ary._strides[-1] != 1 or \
                ary._bid is not None and ary._bid != ex.bid:
            return unbound_fields(ndim, 2 * checked + len(sites))
        fast = ary._unpacked
        if fast is None:
            fast = ary._unpacked = self._fast_fields(ary)
        head, codes, checkers = fast
        if checked:
            head += checkers
        if codes is None:
            return head + (self._sink.append,) * len(sites)
        g, register, logs = ex.cur.g, self.site_logs.append, []
        for line, store in sites:
            log = []
            register((g, line, codes[store], log))
            logs.append(log.append)
        return head + tuple(logs)

    def _fast_fields(self, ary):
        """(layout fields, (load code, store code) of its log entries or None: not counted,
        (load checker, store checker)). The layout's first field is the storage: another
        thread's local array reuses the rest (`ThreadArray.fresh_local`)."""
        codes = None
        if ary._space in ("global", "shared"):
            slot = self.inst.slot(ary._space, ary._h)
            codes = (slot, slot + 1)
        checkers = tuple(self.inst.scalar_checker(ary._space, ary._h, kind) or _no_check
                         for kind in ("load", "store"))
        return ((ary._store, ary._off, *ary._strides, *ary.shape, ary._space != "const"),
                codes, checkers)

    def due(self) -> bool:
        """Enough logged (or recorded) to count now."""
        return len(self.site_logs) >= FLUSH_SITES or self.inst.pending() >= FLUSH_ACCESSES

    def flush(self) -> None:
        self.inst.flush(self.site_logs)
        self.site_logs = []
        self._sink.clear()


def _no_check(flat, g, frame, value=None):
    """The checker of an array nothing checks (local, constant)."""


def unbound_fields(ndim: int, extra: int) -> tuple:
    """What an array's locals hold when the fast path does not cover it (or before the name is
    bound): every bounds test fails, so each access takes the original subscript."""
    return (None, 0, *(0,) * (2 * ndim), False, *(None,) * extra)


class Site:
    """Stands for the frame of a compiled access when it calls a checker, which reads
    `f_lineno` and `f_code.co_filename` to report a finding."""

    __slots__ = ("f_lineno", "co_filename")

    def __init__(self, line: int, filename: str):
        self.f_lineno, self.co_filename = line, filename

    @property
    def f_code(self):
        return self


class _Fill(ast.NodeTransformer):
    """Replaces the placeholder names `__gg_e<k>` of a template with index expressions."""

    def __init__(self, exprs):
        self.exprs = exprs

    def visit_Name(self, node):
        if node.id.startswith("__gg_e") and node.id[6:].isdigit():
            return copy.deepcopy(self.exprs[int(node.id[6:])])
        return node


def _parse(source: str, exprs, like) -> list:
    tree = _Fill(exprs).visit(ast.parse(source))
    for node in ast.walk(tree):
        if isinstance(node, (ast.expr, ast.stmt)):
            ast.copy_location(node, like)
    return tree.body


def _simple(expr) -> bool:
    return isinstance(expr, (ast.Name, ast.Constant))


def _bounds(f: list[str], exprs) -> str:
    n = len(exprs)
    return " and ".join(
        f"0 <= {f'__gg_e{k}' if _simple(e) else f'(__gg_i{k} := __gg_e{k})'} < {f[2 + n + k]}"
        for k, e in enumerate(exprs))


def _flat(f: list[str], exprs, contiguous: bool) -> str:
    """The flat position; a C-contiguous array's last stride is 1 (`unpack` makes sure)."""
    n = len(exprs)
    terms = [f[1]]
    for k, e in enumerate(exprs):
        value = f"__gg_e{k}" if _simple(e) else f"__gg_i{k}"
        terms.append(value if contiguous and k == n - 1 else f"{value} * {f[2 + k]}")
    return " + ".join(terms)


def _subscript(name: str, ndim: int) -> str:
    return f"{name}[{', '.join(f'__gg_e{k}' for k in range(ndim))}]"


def load(array: ArrayAccesses, indices: list, like) -> ast.expr:
    """The compiled twin of the load `name[indices]` (a `Subscript` node `like`)."""
    f = array.fields()
    test = array.load_test(like.lineno, _flat(f, indices, array.contiguous))
    src = (f"({f[0]}[__gg_f] if {_bounds(f, indices)} and {test} "
           f"else {_subscript(array.name, array.ndim)})")
    return _parse(src, indices, like)[0].value


def store(array: ArrayAccesses, indices: list, value: ast.expr, like) -> list:
    """The compiled twin of the statement `name[indices] = value` (`like`); `value` already
    converted for an integer array (numpy refuses a Python int out of the type's range)."""
    f = array.fields()
    src = (f"__gg_v = __gg_value\n"
           f"if {f[-1]} and {_bounds(f, indices)}:\n"
           f"    __gg_f = {_flat(f, indices, array.contiguous)}\n"
           + "".join(f"    {s}\n" for s in array.store_lines(like.lineno).splitlines()) +
           f"    {f[0]}[__gg_f] = __gg_v\n"
           f"    __gg_ex.progress += 1\n"
           f"else:\n"
           f"    {_subscript(array.name, array.ndim)} = __gg_v\n")
    stmts = _parse(src, indices, like)
    stmts[0].value = value
    return stmts


def preamble(has_while: bool, recording: bool, like) -> list:
    """The loop budget (`tick`); the thread's id, which compiled accesses give recorders."""
    src = (f"{TICK} = {LOOP_TICKS}\n" if has_while else "") + \
        ("__gg_g = __gg_thread_id()\n" if recording else "")
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
