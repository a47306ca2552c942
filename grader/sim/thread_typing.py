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
import types as pytypes

import numpy as np

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


def cast(value, t):
    """`value` as numba's type `t` (a numpy scalar type) holds it."""
    cls = value.__class__
    if cls is t:
        return value
    if cls is int:
        bounds = _PY_INT_RANGE.get(t)
        if bounds is not None:
            if bounds[0] <= value <= bounds[1]:
                return value
            return int(_wrap(value, t))
        if issubclass(t, np.integer):
            return _wrap(value, t)
    elif cls is float and t is np.float64 or cls is bool and t is np.bool_:
        return value
    return t(value)


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
    casts = tuple(None if d == a else a.type for d, a in zip(dtypes, targets))
    samples = tuple(c(1) if k is None else k(1) for c, k in zip(classes, casts))
    try:
        out = fn(*samples)
    except Exception:  # noqa: BLE001 - nothing to learn from the sample: compute as is
        return _DIRECT
    got = _dtype_of_class(out.__class__)
    result_cast = None if got == result else result.type
    if result_cast is None and all(k is None for k in casts):
        return _DIRECT
    return casts, result_cast


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
class _Rewrite(ast.NodeTransformer):
    def __init__(self, types: simt_typing.FunctionTypes, kind: str):
        self.types, self.kind = types, kind
        self.consts: dict = {}
        self._temps = 0

    def _type_name(self, nbtype):
        dtype = simt_typing.as_dtype(nbtype) if nbtype is not None else None
        if dtype is None or dtype.kind not in "biufc":
            return None
        name = f"__gg_t_{dtype.name}"
        self.consts[name] = dtype.type
        return name

    def _local(self, name: str, line: int):
        return self._type_name(self.types.local(name, line))

    def _cast(self, value, type_name, like):
        call = ast.Call(ast.Name("__gg_cast", ast.Load()), [value, ast.Name(type_name, ast.Load())], [])
        return ast.copy_location(call, like)

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

    # nested functions are not numba's (nor typed here): left as written
    def visit_FunctionDef(self, node):
        return node

    visit_Lambda = visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Constant(self, node):
        if type(node.value) is float:
            name = f"__gg_f_{node.value.hex().replace('-', 'm').replace('.', '_')}"
            name = name.replace("+", "p")
            self.consts[name] = np.float64(node.value)
            return ast.copy_location(ast.Name(name, ast.Load()), node)
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if type(node.op) not in _BINOPS:
            return node
        return self._call("__gg_bin", type(node.op), [node.left, node.right], node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if type(node.op) not in _UNOPS:
            return node
        return self._call("__gg_un", type(node.op), [node.operand], node)

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) != 1 or type(node.ops[0]) not in _COMPARES:
            return node
        return self._call("__gg_bin", type(node.ops[0]), [node.left, node.comparators[0]], node)

    def visit_Assign(self, node):
        self.generic_visit(node)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            t = self._local(node.targets[0].id, node.lineno)
            if t is not None:
                node.value = self._cast(node.value, t, node.value)
            return node
        return [node, *self._cast_stmts(node.targets, node)]

    def visit_AnnAssign(self, node):
        self.generic_visit(node)
        if node.value is not None and isinstance(node.target, ast.Name):
            t = self._local(node.target.id, node.lineno)
            if t is not None:
                node.value = self._cast(node.value, t, node.value)
        return node

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        op = type(node.op)
        if op not in _BINOPS:
            return node
        target = node.target
        if isinstance(target, ast.Name):
            t = self._local(target.id, node.lineno)
            if t is None:
                return node
            value = self._call("__gg_bin", op, [ast.Name(target.id, ast.Load()), node.value], node)
            stmt = ast.Assign([ast.Name(target.id, ast.Store())], self._cast(value, t, node))
            return ast.copy_location(stmt, node)
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
        self.generic_visit(node)
        casts = self._cast_stmts([node.target], node)
        if casts:
            node.body[:0] = casts
        return node

    def visit_Return(self, node):
        self.generic_visit(node)
        if self.kind == "device" and node.value is not None:
            t = self._type_name(self.types.return_type)
            if t is not None:
                node.value = self._cast(node.value, t, node.value)
        return node


_codes: dict = {}


def typed_code(func, types: simt_typing.FunctionTypes, kind: str, mark_end: bool = False):
    """(code, constants it reads as globals) of `func` rewritten for `types`, or None when it
    has no source (or its closure cannot be rebuilt). `kind`: "kernel" | "device"."""
    key = (func.__code__, id(types), kind, mark_end)
    hit = _codes.get(key)
    if hit is not None or key in _codes:
        return hit
    result = None
    try:
        result = _build(func, types, kind, mark_end)
    except (OSError, TypeError, SyntaxError, IndexError, KeyError, ValueError):
        result = None
    _codes[key] = result
    return result


def _build(func, types, kind, mark_end):
    code = func.__code__
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef) or fdef.name != func.__name__:
        return None
    fdef.decorator_list = []
    rewrite = _Rewrite(types, kind)
    fdef.body = [s for stmt in fdef.body for s in _as_list(rewrite.visit(stmt))]
    if mark_end:
        last = fdef.body[-1]
        ret = ast.Return(ast.Name(_END_MARKER, ast.Load()))
        ast.copy_location(ret, last)
        ret.lineno = ret.value.lineno = getattr(last, "end_lineno", None) or last.lineno
        ast.copy_location(ret.value, ret)
        fdef.body.append(ret)
    ast.fix_missing_locations(tree)
    ast.increment_lineno(tree, code.co_firstlineno - 1)
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

    __slots__ = ("func", "globals", "closure", "_fns", "__name__", "__qualname__")

    def __init__(self, func, new_globals):
        self.func, self.globals, self.closure = func, new_globals, func.__closure__
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
            typed = typed_code(func, types, "device")
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

    @property
    def enabled(self) -> bool:
        return self.types is not None

    def kernel_code(self, func, mark_end: bool):
        typed = typed_code(func, self.types, "kernel", mark_end)
        if typed is None:
            self.note = (f"no source for {func.__name__!r}: values follow Python's and numpy's "
                         f"promotion rules, not numba's types")
            return None
        code, consts = typed
        self.globals.update(consts)
        return code

    def device(self, func, new_globals) -> TypedDevice:
        return TypedDevice(func, new_globals)


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
