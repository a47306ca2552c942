"""numba's types for the per-thread executor.

The per-thread executor runs a kernel's own Python code, and Python and numpy promote
differently from numba: numba computes `int32 + int32` in int64, keeps `acc = 0.0` in float64
when every addend is float32, and compares a float32 with a float literal in float64. The SIMT
executor follows numba; so does the per-thread executor, through the same type inference
(`simt.typing.infer`: numba-cuda's own, run on the CPU) and a light rewrite of the function's
syntax tree, compiled with the original file name and line numbers:

    x = e          ->  x = __gg_cast(e, <numba's type of x at this line>)
    x op= e        ->  x = __gg_cast(__gg_bin(op, x, e), <type>)
    a[i] op= e     ->  t1 = a; t2 = i; t1[t2] = __gg_bin(op, t1[t2], e)
    a op b, a < b  ->  __gg_bin(op, a, b)   # operands converted as numba's typing context says
    -a, ~a         ->  __gg_un(op, a)
    2.5            ->  a float64 constant (numba's type for float literals)
    for x in ...:  ->  the loop variable cast at the top of the body
    return e       ->  cast to the device function's return type

Python ints stay Python ints where numba's type is a signed integer or an unsigned one narrower
than 64 bits: in every operation numba promotes those to int64, which is how `__gg_bin` treats a
Python int (values are wrapped to the type's range on assignment).

`for_launch` raises `TypingRefused` when numba's typing refuses the kernel (it would not
compile for a GPU); when inference is unavailable (numba's built-in CUDA target without
numba-cuda, no source) it returns a `Typer` whose `note` says why, and the code runs as written.
"""

from __future__ import annotations

import ast
import inspect
import operator
import textwrap
import zlib
import types as pytypes

import numpy as np

from . import thread_access
from .kernel_source import _END_MARKER
from .simt import typing as simt_typing
from .simt.typing import TypingRefused
from .simt.unsupported import SimtUnsupported

__all__ = ["Typer", "TypingRefused", "for_launch"]

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
}
_COMPARES = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
             ast.GtE: operator.ge, ast.Eq: operator.eq, ast.NotEq: operator.ne}
_UNOPS = {ast.USub: operator.neg, ast.Invert: operator.invert}


# ---------------------------------------------------------------- runtime helpers
_PY_DTYPES = {int: np.dtype(np.int64), float: np.dtype(np.float64), bool: np.dtype(np.bool_),
              complex: np.dtype(np.complex128)}
# integer types whose values a Python int represents faithfully (numba promotes them to int64)
_PY_INT_RANGE = {t: (int(np.iinfo(t).min), int(np.iinfo(t).max)) for t in (
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32)}
_DIRECT = None  # plan: compute as is


def _dtype_of_class(cls):
    dtype = _PY_DTYPES.get(cls)
    if dtype is None and issubclass(cls, (np.bool_, np.number)):
        dtype = np.dtype(cls)
    return dtype


def _wrap(value: int, t):
    """A Python int converted to the integer type `t` with C's wrap-around."""
    info = np.iinfo(t)
    bits = info.bits
    value &= (1 << bits) - 1
    if info.min < 0 and value >= 1 << (bits - 1):
        value -= 1 << bits
    return t(value)


# what a value of numba's type `t` is held as: Python ints for the integer types numba
# promotes to int64, numpy scalars otherwise (float64 as np.float64: a Python float is "weak"
# in numpy's promotion, np.float64 * float32 would give float32)
REPRESENTATION = {t: int for t in _PY_INT_RANGE}
REPRESENTATION[np.float64] = np.float64


def representation(t):
    """The class a local of numba's (numpy) type `t` holds after `cast`."""
    return REPRESENTATION.get(t, t)


def cast(value, t):
    """`value` as numba's type `t` (a numpy scalar type) holds it, in `representation(t)`."""
    cls = value.__class__
    bounds = _PY_INT_RANGE.get(t)
    if bounds is not None:
        if cls is not int:
            if cls is bool or isinstance(value, (np.integer, np.bool_)):
                value = int(value)
            else:  # a float: converted as numba converts it (truncation)
                return int(t(value))
        if bounds[0] <= value <= bounds[1]:
            return value
        return int(_wrap(value, t))
    if cls is t:
        return value
    if cls is int and issubclass(t, np.integer):
        return _wrap(value, t)
    return t(value)


_converters: dict = {}  # numpy type -> its converter
_converted_to: dict = {}  # converter -> its numpy type


def converter(t):
    """A function converting a value to numpy type `t` as numba converts it: a Python int
    wraps around to an integer type (numpy raises OverflowError for one out of range)."""
    conv = _converters.get(t)
    if conv is None:
        if issubclass(t, np.integer):
            info = np.iinfo(t)

            def conv(value, t=t, lo=int(info.min), hi=int(info.max)):
                if value.__class__ is int and not lo <= value <= hi:
                    return _wrap(value, t)
                return t(value)
        else:
            conv = t
        _converters[t] = conv
        _converted_to[conv] = t
    return conv


_plans: dict = {}


def _plan(fn, classes):
    """(operand casts, result cast) that make numpy compute `fn` as numba does, or _DIRECT."""
    dtypes = tuple(_dtype_of_class(c) for c in classes)
    if any(d is None for d in dtypes):
        return _DIRECT
    sig = simt_typing.signature(fn, dtypes)
    if sig is None:
        return _DIRECT
    targets, result = sig
    casts = tuple(None if d == a else converter(a.type) for d, a in zip(dtypes, targets))
    samples = tuple(c(1) if k is None else k(1) for c, k in zip(classes, casts))
    try:
        out = fn(*samples)
    except Exception:  # noqa: BLE001 - nothing to learn from the sample: compute as is
        return _DIRECT
    got = _dtype_of_class(out.__class__)
    result_cast = None if got == result else converter(result.type)
    if result_cast is None and all(k is None for k in casts):
        return _DIRECT
    return casts, result_cast


_static: dict = {}


def static_plan(fn, classes):
    """(`_plan`, class of the result) of `fn` on operands of `classes`, for code that is
    rewritten once rather than decided per call; None where the class depends on the values
    (a power of integers is a float for a negative exponent) or cannot be learnt."""
    key = (fn, *classes)
    if key in _static:
        return _static[key]
    answer = None
    if not (fn is operator.pow and all(c is int or issubclass(c, (np.integer, bool, np.bool_))
                                       for c in classes)):
        plan = _plans.get(key)
        if plan is None:
            plan = _plans[key] = _plan(fn, classes)
        try:
            samples = [c(1) for c in classes]
            if plan is _DIRECT:
                out = fn(*samples)
            else:
                casts, result_cast = plan
                out = fn(*(s if k is None else k(s) for s, k in zip(samples, casts)))
                out = out if result_cast is None else result_cast(out)
            answer = (plan, out.__class__)
        except Exception:  # noqa: BLE001 - decided per call instead
            answer = None
    _static[key] = answer
    return answer


def binop(fn, a, b):
    """`fn(a, b)` with the operand types numba's typing context chooses."""
    key = (fn, a.__class__, b.__class__)
    try:
        plan = _plans[key]
    except KeyError:
        plan = _plans[key] = _plan(fn, key[1:])
    if plan is _DIRECT:
        return fn(a, b)
    (ca, cb), cr = plan
    out = fn(a if ca is None else ca(a), b if cb is None else cb(b))
    return out if cr is None else cr(out)


def unop(fn, a):
    key = (fn, a.__class__)
    try:
        plan = _plans[key]
    except KeyError:
        plan = _plans[key] = _plan(fn, key[1:])
    if plan is _DIRECT:
        return fn(a)
    (ca,), cr = plan
    out = fn(a if ca is None else ca(a))
    return out if cr is None else cr(out)


HELPERS = {"__gg_cast": cast, "__gg_bin": binop, "__gg_un": unop}
for _node, _fn in (*_BINOPS.items(), *_COMPARES.items(), *_UNOPS.items()):
    HELPERS[f"__gg_op_{_node.__name__}"] = _fn


# ---------------------------------------------------------------- types of runtime values
def value_type(value):
    """numba type of a value as the per-thread executor holds it (argument or local)."""
    cls = value.__class__
    dtype = _dtype_of_class(cls)
    if dtype is not None:
        return simt_typing.scalar_type(dtype)
    if isinstance(value, tuple):
        return simt_typing._numba()[0].BaseTuple.from_types([value_type(v) for v in value],
                                                            simt_typing.named_class(value))
    if hasattr(value, "estrides") and hasattr(value, "flat"):  # a launch's DeviceBuffer
        return simt_typing.array_type(value.dtype, len(value.shape),
                                      bool(value.data.flags.c_contiguous))
    if hasattr(value, "dtype") and hasattr(value, "ndim") and hasattr(value, "shape"):
        return simt_typing.array_type(value.dtype, value.ndim,
                                      readonly=getattr(value, "_space", None) == "const")
    raise TypeError(f"no numba type for a {cls.__name__}")


def _value_key(value):
    cls = value.__class__
    if isinstance(value, tuple):
        key = tuple(_value_key(v) for v in value)
        return key if cls is tuple else (cls, key)
    if _dtype_of_class(cls) is not None:
        return cls
    return cls, getattr(value, "dtype", None), getattr(value, "ndim", None), \
        getattr(value, "_space", None)


# ---------------------------------------------------------------- the rewrite
class _Scan:
    """How each name of a function is bound (read before the rewrite): what the static classes
    and the compiled accesses may assume."""

    def __init__(self, fdef: ast.FunctionDef):
        args = fdef.args
        self.params = [a.arg for a in (*args.posonlyargs, *args.args)]
        self.cast_lines: dict = {}  # name -> lines of the bindings the rewrite casts
        self.other: set = {a.arg for a in args.kwonlyargs}  # bound in ways nothing is assumed of
        self.other.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
        self.not_by_assign: set = set()  # bound by a `for`, `+=` or annotated assignment
        self.bound = set(self.params) | self.other
        self.has_while = False
        for stmt in fdef.body:
            self._visit(stmt)
        self.bound |= self.other

    def _cast_targets(self, target, line):
        """Names the rewrite casts: a name, or names directly in a tuple; deeper ones: other."""
        direct = [target] if isinstance(target, ast.Name) else \
            [e for e in getattr(target, "elts", ()) if isinstance(e, ast.Name)]
        for n in direct:
            self.cast_lines.setdefault(n.id, []).append(line)
        self.other.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name) and
                          isinstance(n.ctx, ast.Store) and n not in direct)

    def _visit(self, node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            # a nested scope may rebind our names (nonlocal): assume nothing of any name in it
            self.other.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name))
            if not isinstance(node, ast.Lambda):
                self.other.add(node.name)
                self.bound.add(node.name)
            return
        if isinstance(node, ast.While):
            self.has_while = True
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self._cast_targets(target, node.lineno)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            if isinstance(node.target, ast.Name):
                self.not_by_assign.add(node.target.id)
                if isinstance(node, ast.AugAssign) and type(node.op) not in _BINOPS:
                    self.other.add(node.target.id)
                elif getattr(node, "value", True) is not None:  # (`x: int` binds nothing)
                    self.cast_lines.setdefault(node.target.id, []).append(node.lineno)
        elif isinstance(node, ast.For):
            self._cast_targets(node.target, node.lineno)
            self.not_by_assign.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            self.other.update(node.names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self.other.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self.other.add(node.name)
        elif isinstance(node, (ast.NamedExpr, ast.withitem, ast.Delete, ast.AsyncFor,
                               ast.comprehension)):
            self.other.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and
                              not isinstance(n.ctx, ast.Load))
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            self.bound.add(node.id)
        for child in ast.iter_child_nodes(node):
            self._visit(child)


def _cls(node):
    """The class of the value an expression of the rewritten code evaluates to, when it is
    known before running (None: only the running code knows)."""
    return getattr(node, "_gg_cls", None)


def _known(node, cls):
    node._gg_cls = cls
    return node


class _Rewrite(ast.NodeTransformer):
    def __init__(self, func, types: simt_typing.FunctionTypes, kind: str, scan: _Scan,
                 access: str | None):
        self.func, self.types, self.kind, self.scan = func, types, kind, scan
        self.consts: dict = {}
        self._temps = 0
        self.classes = self._local_classes()
        self.access = access  # compiled accesses: None, "count" or "record" (thread_access)
        arrays = self._array_locals()
        self.array_names = set(arrays)
        self.arrays = arrays if access else {}  # name -> (ArrayAccesses, class)

    # --- what is known before running
    def _dtype(self, nbtype):
        dtype = simt_typing.as_dtype(nbtype) if nbtype is not None else None
        return dtype if dtype is not None and dtype.kind in "biufc" else None

    def _local_classes(self) -> dict:
        """name -> the class its value always has (every binding casts to one representation)."""
        scan, out = self.scan, {}
        for name in scan.bound:
            if name in scan.other:
                continue
            reps = set()
            for line in scan.cast_lines.get(name, ()):
                dtype = self._dtype(self.types.local(name, line))
                reps.add(representation(dtype.type) if dtype is not None else None)
            if name in scan.params:
                dtype = self._dtype(self.types.by_name.get(name))
                reps.add(representation(dtype.type) if dtype is not None else None)
            if len(reps) == 1 and None not in reps:
                out[name] = reps.pop()
        return out

    def _array_locals(self) -> dict:
        """name -> (its ArrayAccesses, element class) of the array locals whose accesses can be
        compiled: bound only as parameters or by `=`, with one number of dimensions."""
        types = simt_typing._numba()[0]
        scan, out = self.scan, {}
        for name in scan.bound:
            nbtype = self.types.by_name.get(name)
            if not isinstance(nbtype, types.Array) or name in scan.other or \
                    name in scan.not_by_assign:
                continue
            if any(not isinstance(self.types.by_line.get((name, line), nbtype), types.Array) or
                   self.types.by_line.get((name, line), nbtype).ndim != nbtype.ndim
                   for line in scan.cast_lines.get(name, ())):
                continue
            dtype = self._dtype(nbtype.dtype)
            out[name] = (thread_access.ArrayAccesses(
                name, nbtype.ndim, nbtype.layout == "C", self.access == "record", self._site),
                dtype.type if dtype is not None else None)
        return out

    def _global_class(self, name):
        if name in self.scan.bound or name in self.func.__code__.co_freevars:
            return None
        value = self.func.__globals__.get(name, _MISSING)
        cls = value.__class__
        if cls in (int, float, bool) or isinstance(value, (np.number, np.bool_)):
            return cls
        return None

    # --- emitted helpers
    def _site(self, line: int) -> str:
        """The global holding the `thread_access.Site` of a line (recorded accesses)."""
        name = f"__gg_site_{line}_{zlib.crc32(self.func.__code__.co_filename.encode())}"
        self.consts[name] = thread_access.Site(line, self.func.__code__.co_filename)
        return name

    def _type_const(self, t) -> str:
        name = f"__gg_t_{np.dtype(t).name}"
        self.consts[name] = np.dtype(t).type
        return name

    def _type_name(self, nbtype):
        dtype = self._dtype(nbtype)
        return self._type_const(dtype.type) if dtype is not None else None

    def _local(self, name: str, line: int):
        return self._type_name(self.types.local(name, line))

    def _convert(self, value, conv, like):
        """`conv(value)`: `conv` a `converter` (or a numpy type, for `converter` of it)."""
        conv = converter(conv) if isinstance(conv, type) else conv
        name = f"__gg_to_{np.dtype(_converted_to[conv]).name}"
        self.consts[name] = conv
        call = ast.Call(ast.Name(name, ast.Load()), [value], [])
        return ast.copy_location(call, like)

    def _cast(self, value, type_name, like):
        t = self.consts[type_name]
        rep = representation(t)
        if _cls(value) is rep and rep is not int:  # ints: the cast wraps them to the type
            return value
        call = ast.Call(ast.Name("__gg_cast", ast.Load()), [value, ast.Name(type_name, ast.Load())], [])
        return _known(ast.copy_location(call, like), rep)

    def _cast_stmts(self, targets, node) -> list:
        out = []
        for target in targets:
            names = [target] if isinstance(target, ast.Name) else \
                [e for e in getattr(target, "elts", ()) if isinstance(e, ast.Name)]
            for name in names:
                t = self._local(name.id, node.lineno)
                if t is not None:
                    stmt = ast.Assign([ast.Name(name.id, ast.Store())],
                                      self._cast(ast.Name(name.id, ast.Load()), t, node))
                    out.append(ast.copy_location(stmt, node))
        return out

    def _call(self, helper, op, args, like):
        call = ast.Call(ast.Name(helper, ast.Load()),
                        [ast.Name(f"__gg_op_{op.__name__}", ast.Load()), *args], [])
        return ast.copy_location(call, like)

    def _typed(self, op, fn, node, operands, rebuild):
        """`node` computing `fn(*operands)` as numba does: as written where the operand classes
        are known and numpy already agrees, with conversions where it does not, else through
        `__gg_bin` / `__gg_un` (which decide per call)."""
        classes = tuple(_cls(o) for o in operands)
        static = static_plan(fn, classes) if None not in classes else None
        if static is None:
            helper = "__gg_bin" if len(operands) == 2 else "__gg_un"
            return self._call(helper, op, list(operands), node)
        plan, result = static
        if plan is not _DIRECT:
            casts, result_cast = plan
            operands = [o if k is None else self._convert(o, k, o)
                        for o, k in zip(operands, casts)]
        out = rebuild(operands)
        if plan is not _DIRECT and result_cast is not None:
            out = self._convert(out, result_cast, node)
        return _known(out, result)

    # nested functions are not numba's (nor typed here): left as written
    def visit_FunctionDef(self, node):
        return node

    visit_Lambda = visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load):
            cls = self.classes.get(node.id) if node.id in self.scan.bound else \
                self._global_class(node.id)
            if cls is not None:
                node._gg_cls = cls
        return node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if node.attr in ("size", "ndim") and isinstance(node.value, ast.Name) and \
                node.value.id in self.array_names:
            node._gg_cls = int  # ThreadArray.size / .ndim: Python ints
        return node

    def visit_Constant(self, node):
        if type(node.value) is float:
            name = f"__gg_f_{node.value.hex().replace('-', 'm').replace('.', '_')}"
            name = name.replace("+", "p")
            self.consts[name] = np.float64(node.value)
            return _known(ast.copy_location(ast.Name(name, ast.Load()), node), np.float64)
        if type(node.value) in (int, bool):
            node._gg_cls = type(node.value)
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        op = type(node.op)
        if op not in _BINOPS:
            return node
        return self._binop(op, node.left, node.right, node)

    def _binop(self, op, left, right, like):
        def rebuild(operands):
            return ast.copy_location(ast.BinOp(operands[0], op(), operands[1]), like)
        return self._typed(op, _BINOPS[op], like, (left, right), rebuild)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        op = type(node.op)
        if op is ast.Not:
            return _known(node, bool)
        if op not in _UNOPS:
            return node

        def rebuild(operands):
            return ast.copy_location(ast.UnaryOp(op(), operands[0]), node)
        return self._typed(op, _UNOPS[op], node, (node.operand,), rebuild)

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) != 1 or type(node.ops[0]) not in _COMPARES:
            return node
        op = type(node.ops[0])

        def rebuild(operands):
            return ast.copy_location(ast.Compare(operands[0], [op()], [operands[1]]), node)
        return self._typed(op, _COMPARES[op], node, (node.left, node.comparators[0]), rebuild)

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Attribute) and node.func.attr in _WIDTH_SENSITIVE:
            # locals hold integers as Python ints; these intrinsics need the type's width
            node.args = [self._convert(a, dtype.type, a) if isinstance(a, ast.Name) and
                         (dtype := self._dtype(self.types.by_name.get(a.id))) is not None and
                         dtype.kind in "iu" else a for a in node.args]
        return node

    # --- array accesses
    def _compilable(self, node) -> tuple | None:
        """(name, ndim, index expressions) of a subscript whose access can be compiled."""
        if not isinstance(node.value, ast.Name) or node.value.id not in self.arrays:
            return None
        ndim = self.arrays[node.value.id][0].ndim
        index = node.slice
        elts = index.elts if isinstance(index, ast.Tuple) else [index]
        if len(elts) != ndim or not all(thread_access.pure(e) for e in elts) or \
                any(isinstance(e, (ast.Slice, ast.Starred)) for e in elts):
            return None
        for e in elts:  # a name must be an integer (not a slice or a tuple held in a local)
            if isinstance(e, ast.Name) and e.id in self.scan.bound:
                dtype = self._dtype(self.types.by_name.get(e.id))
                if dtype is None or dtype.kind not in "iub":
                    return None
            if isinstance(e, ast.Constant) and type(e.value) is not int:
                return None
        return node.value.id, ndim, elts

    def visit_Subscript(self, node):
        target = self._compilable(node) if isinstance(node.ctx, ast.Load) else None
        self.generic_visit(node)
        if target is None:
            value = node.value
            if isinstance(value, ast.Attribute) and value.attr in ("shape", "strides") and \
                    isinstance(value.value, ast.Name) and value.value.id in self.array_names:
                node._gg_cls = int  # an array's shape: Python ints
            return node
        return self._load(target[0], node)

    def _load(self, name, node):
        index = node.slice
        elts = index.elts if isinstance(index, ast.Tuple) else [index]
        array, cls = self.arrays[name]
        out = thread_access.load(array, elts, node)
        return _known(out, cls) if cls is not None else out

    def _store(self, name, target, value, like):
        index = target.slice
        elts = index.elts if isinstance(index, ast.Tuple) else [index]
        cls = self.arrays[name][1]
        if cls is not None and issubclass(cls, np.integer) and _cls(value) is not cls:
            value = self._convert(value, cls, value)  # stored as numba stores it (wrapped)
        return thread_access.store(self.arrays[name][0], elts, value, like)

    def _bind_arrays(self, targets, like) -> list:
        names = [n.id for t in targets for n in ast.walk(t)
                 if isinstance(n, ast.Name) and n.id in self.arrays]
        return [self.arrays[n][0].bind(like) for n in names]

    def visit_Assign(self, node):
        target = node.targets[0]
        compiled = (self._compilable(target) if len(node.targets) == 1 and
                    isinstance(target, ast.Subscript) else None)
        self.generic_visit(node)
        if compiled is not None:
            return self._store(compiled[0], target, node.value, node)
        binds = self._bind_arrays(node.targets, node)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            t = self._local(node.targets[0].id, node.lineno)
            if t is not None:
                node.value = self._cast(node.value, t, node.value)
            return [node, *binds] if binds else node
        return [node, *self._cast_stmts(node.targets, node), *binds]

    def visit_AnnAssign(self, node):
        self.generic_visit(node)
        if node.value is not None and isinstance(node.target, ast.Name):
            t = self._local(node.target.id, node.lineno)
            if t is not None:
                node.value = self._cast(node.value, t, node.value)
        return node

    def visit_AugAssign(self, node):
        op = type(node.op)
        target = node.target
        compiled = self._compilable(ast.copy_location(
            ast.Subscript(target.value, target.slice, ast.Load()), target)) \
            if isinstance(target, ast.Subscript) and op in _BINOPS else None
        self.generic_visit(node)
        if op not in _BINOPS:
            return node
        if isinstance(target, ast.Name):
            t = self._local(target.id, node.lineno)
            if t is None:
                return node
            current = self.visit_Name(ast.copy_location(ast.Name(target.id, ast.Load()), target))
            value = self._binop(op, current, node.value, node)
            stmt = ast.Assign([ast.Name(target.id, ast.Store())], self._cast(value, t, node))
            return ast.copy_location(stmt, node)
        if compiled is not None:  # a[i] op= e  ->  a[i] = a[i] op e, both compiled
            name = compiled[0]
            current = self._load(name, ast.copy_location(
                ast.Subscript(ast.Name(name, ast.Load()), target.slice, ast.Load()), target))
            return self._store(name, target, self._binop(op, current, node.value, node), node)
        if isinstance(target, ast.Subscript):
            base, index = self._temp(), self._temp()
            load = ast.Subscript(ast.Name(base, ast.Load()), ast.Name(index, ast.Load()), ast.Load())
            store = ast.Subscript(ast.Name(base, ast.Load()), ast.Name(index, ast.Load()), ast.Store())
            value = self._call("__gg_bin", op, [ast.copy_location(load, node), node.value], node)
            stmts = [ast.Assign([ast.Name(base, ast.Store())], target.value),
                     ast.Assign([ast.Name(index, ast.Store())], target.slice),
                     ast.Assign([store], value)]
            return [ast.copy_location(s, node) for s in stmts]
        return node

    def _temp(self) -> str:
        self._temps += 1
        return f"__gg_s{self._temps}"

    def visit_For(self, node):
        ranged = isinstance(node.iter, ast.Call) and isinstance(node.iter.func, ast.Name) and \
            node.iter.func.id == "range" and "range" not in self.scan.bound and \
            "range" not in self.func.__globals__
        self.generic_visit(node)
        casts = self._cast_stmts([node.target], node)
        if ranged and isinstance(node.target, ast.Name) and self.classes.get(node.target.id) is int:
            casts = []  # range() yields Python ints, within the loop variable's type
        node.body[:0] = casts
        return node

    def visit_While(self, node):
        self.generic_visit(node)
        node.body[:0] = thread_access.tick(node)
        return node

    def visit_Return(self, node):
        self.generic_visit(node)
        if self.kind == "device" and node.value is not None:
            t = self._type_name(self.types.return_type)
            if t is not None:
                node.value = self._cast(node.value, t, node.value)
        return node

    def preamble(self, fdef) -> list:
        """Statements run at entry (parameters cast to numba's types, the loop budget, the
        compiled arrays' locals); completes the compiled arrays' bindings."""
        out = []
        for name in self.scan.params:
            t = self._type_name(self.types.by_name.get(name))
            if t is not None:
                stmt = ast.Assign([ast.Name(name, ast.Store())],
                                  self._cast(ast.Name(name, ast.Load()), t, fdef))
                out.append(ast.copy_location(stmt, fdef))
        recording = self.access == "record" and any(a.sites for a, _ in self.arrays.values())
        out += thread_access.preamble(self.scan.has_while, recording, fdef)
        for name, (array, _) in self.arrays.items():
            if array.sites:
                out.append(array.bind(fdef, unbound=name not in self.scan.params))
        for array, _ in self.arrays.values():
            array.finish()
        return out


_MISSING = object()
_WIDTH_SENSITIVE = {"popc", "brev", "clz", "ffs"}  # cuda.<name>: the result depends on the width
_codes: dict = {}


def typed_code(func, types: simt_typing.FunctionTypes, kind: str, mark_end: bool = False,
               access: str | None = None):
    """(code, constants it reads as globals) of `func` rewritten for `types`, or None when it
    has no source (or its closure cannot be rebuilt). `kind`: "kernel" | "device"; `access`:
    compile element accesses (`thread_access`)."""
    key = (func.__code__, id(types), kind, mark_end, access)
    hit = _codes.get(key)
    if hit is not None or key in _codes:
        return hit
    result = None
    try:
        result = _build(func, types, kind, mark_end, access)
    except (OSError, TypeError, SyntaxError, IndexError, KeyError, ValueError):
        result = None
    _codes[key] = result
    return result


def _build(func, types, kind, mark_end, access):
    code = func.__code__
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef) or fdef.name != func.__name__:
        return None
    fdef.decorator_list = []
    # the lines of the file: numba's types are keyed by them, and so are the compiled accesses
    ast.increment_lineno(tree, code.co_firstlineno - 1)
    rewrite = _Rewrite(func, types, kind, _Scan(fdef), access)
    body = [s for stmt in fdef.body for s in _as_list(rewrite.visit(stmt))]
    fdef.body = rewrite.preamble(fdef) + body
    if mark_end:
        last = fdef.body[-1]
        ret = ast.Return(ast.Name(_END_MARKER, ast.Load()))
        ast.copy_location(ret, last)
        ret.lineno = ret.value.lineno = getattr(last, "end_lineno", None) or last.lineno
        ast.copy_location(ret.value, ret)
        fdef.body.append(ret)
    ast.fix_missing_locations(tree)
    if code.co_freevars:  # rebuild inside a factory so the free variables stay free
        params = ast.arguments(posonlyargs=[], args=[ast.arg(v) for v in code.co_freevars],
                               vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                               defaults=[])
        factory = ast.FunctionDef("__gg_factory", params,
                                  [fdef, ast.Return(ast.Name(fdef.name, ast.Load()))], [], None)
        ast.copy_location(factory, fdef)
        ast.fix_missing_locations(factory)
        tree = ast.Module([factory], type_ignores=[])
    namespace: dict = {}
    exec(compile(tree, code.co_filename, "exec"), {}, namespace)
    if code.co_freevars:
        new = namespace["__gg_factory"](*[None] * len(code.co_freevars)).__code__
    else:
        new = namespace[func.__name__].__code__
    if new.co_freevars != code.co_freevars:
        return None
    return new, dict(rewrite.consts)


def _as_list(result):
    return result if isinstance(result, list) else [result]


# ---------------------------------------------------------------- one launch
class TypedDevice:
    """A device function under the per-thread executor: its code follows numba's types for
    each argument-type signature it is called with (typed on first use, like numba compiles)."""

    __slots__ = ("func", "globals", "closure", "access", "_fns", "__name__", "__qualname__")

    def __init__(self, func, new_globals, access: str | None = None):
        self.func, self.globals, self.closure = func, new_globals, func.__closure__
        self.access = access
        self._fns: dict = {}
        self.__name__, self.__qualname__ = func.__name__, func.__qualname__

    def __call__(self, *args, **kwargs):
        if kwargs or len(args) != self.func.__code__.co_argcount:  # as numba folds them
            bound = inspect.signature(self.func).bind(*args, **kwargs)
            bound.apply_defaults()
            args = tuple(bound.arguments.values())
        key = tuple(map(_value_key, args))
        fn = self._fns.get(key)
        if fn is None:
            fn = self._fns[key] = self._specialise(args)
        return fn(*args)

    def _specialise(self, args):
        func = self.func
        code = func.__code__
        try:
            types = simt_typing.infer(func, tuple(value_type(a) for a in args))
            typed = typed_code(func, types, "device", access=self.access)
        except (SimtUnsupported, TypeError, ImportError):
            typed = None  # the kernel was typed; this call runs as written
        if typed is not None:
            code, consts = typed
            self.globals.update(consts)
        fn = pytypes.FunctionType(code, self.globals, func.__name__, func.__defaults__,
                                  self.closure)
        fn.__kwdefaults__ = func.__kwdefaults__
        return fn


class Typer:
    """numba's types for one launch of the per-thread executor (see the module doc)."""

    def __init__(self, types: simt_typing.FunctionTypes | None, note: str | None = None):
        self.types, self.note = types, note
        self.globals = dict(HELPERS)
        # compiled element accesses (`thread_access`): None, "count" or "record"; set by the
        # executor, which then provides the helpers that code calls (`__gg_unpack`, ...)
        self.access = None

    @property
    def enabled(self) -> bool:
        return self.types is not None

    def kernel_code(self, func, mark_end: bool):
        typed = typed_code(func, self.types, "kernel", mark_end, self.access)
        if typed is None:
            self.note = (f"no source for {func.__name__!r}: values follow Python's and numpy's "
                         f"promotion rules, not numba's types")
            return None
        code, consts = typed
        self.globals.update(consts)
        return code

    def device(self, func, new_globals) -> TypedDevice:
        return TypedDevice(func, new_globals, self.access)


def for_launch(py_func, args) -> Typer:
    """numba's types of `py_func` for a launch's arguments (`DeviceBuffer`s, numpy scalars).
    Raises `TypingRefused` when numba refuses the kernel."""
    try:
        argtypes = tuple(value_type(a) for a in args)
    except (TypeError, AttributeError, ValueError, SimtUnsupported, ImportError) as exc:
        return Typer(None, f"numba's type inference is not available ({exc}): values follow "
                           f"Python's and numpy's promotion rules, not numba's types")
    try:
        types = simt_typing.infer(py_func, argtypes)
    except TypingRefused:
        raise
    except (SimtUnsupported, ImportError) as exc:
        return Typer(None, f"numba's type inference is not available ({exc}): values follow "
                           f"Python's and numpy's promotion rules, not numba's types")
    return Typer(types)
