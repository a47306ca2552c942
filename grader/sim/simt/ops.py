"""Arithmetic on lockstep values with numba's typing, and the small built-ins.

A value is a numpy scalar (uniform over the lanes) or a vector of one entry per lane. Operands
are converted to the types numba's typing context chooses for the operation (`int32 + int32` is
computed in int64, `float32 * float64` in float64), so results match a numba-compiled kernel.
"""

from __future__ import annotations

import operator

import numpy as np

from ..device_math import round_ndigits
from . import typing as simt_typing
from .typing import BINOPS
from .unsupported import SimtUnsupported

_NUMPY_BINOPS = {
    "Add": np.add, "Sub": np.subtract, "Mult": np.multiply, "Div": np.true_divide,
    "FloorDiv": np.floor_divide, "Mod": np.remainder, "Pow": np.power, "LShift": np.left_shift,
    "RShift": np.right_shift, "BitAnd": np.bitwise_and, "BitOr": np.bitwise_or,
    "BitXor": np.bitwise_xor,
}
_UNOPS = {"USub": (operator.neg, np.negative), "Invert": (operator.invert, np.invert)}


def cast(value, dtype: np.dtype):
    if isinstance(value, np.ndarray):
        return value if value.dtype == dtype else value.astype(dtype)
    if isinstance(value, tuple):
        raise SimtUnsupported("a tuple where a number is expected")
    return dtype.type(value)


def _dtype(value) -> np.dtype:
    try:
        return value.dtype
    except AttributeError:
        return np.asarray(value).dtype  # a Python number from a tuple of shape entries


_NUMPY_VALUES = (np.ndarray, np.generic)
_binop_plans: dict = {}  # (operator name, dtype, dtype) -> (numpy ufunc, cast a to, cast b to)


def _binop_plan(name, da, db):
    """How `binop` computes `name` on numpy values of dtypes `da`, `db`: the ufunc and the
    dtype each operand is cast to (None: it already has it; `cast` would return it as is)."""
    sig = simt_typing.signature(BINOPS[name], (da, db))
    if sig is None:
        return _NUMPY_BINOPS[name], None, None
    (ta, tb), _ = sig
    return _NUMPY_BINOPS[name], None if ta == da else ta, None if tb == db else tb


class Ops:
    """Mixin of `Ctx`: the expression calls of generated code."""

    line: int

    def cast(self, value, dtype):
        if hasattr(value, "numba_type"):
            raise SimtUnsupported("an array where a number is expected", self.line)
        return cast(value, dtype)

    def binop(self, name, a, b):
        if isinstance(a, _NUMPY_VALUES) and isinstance(b, _NUMPY_VALUES):
            # the common case, planned once per (operator, dtypes): the same casts as below,
            # skipped where the operand already has numba's type
            key = (name, a.dtype, b.dtype)
            plan = _binop_plans.get(key)
            if plan is None:
                plan = _binop_plans[key] = _binop_plan(*key)
            fn, ta, tb = plan
            if ta is not None:
                a = cast(a, ta)
            if tb is not None:
                b = cast(b, tb)
            return fn(a, b)
        sig = simt_typing.signature(BINOPS[name], (_dtype(a), _dtype(b)))
        if sig is not None:
            (ta, tb), _ = sig
            a, b = cast(a, ta), cast(b, tb)
        return _NUMPY_BINOPS[name](a, b)

    def unop(self, name, a):
        py_op, np_op = _UNOPS[name]
        sig = simt_typing.signature(py_op, (_dtype(a),))
        if sig is not None:
            a = cast(a, sig[0][0])
        return np_op(a)

    def not_(self, a):
        return np.logical_not(a)

    def and_(self, a, rest):
        """`a and rest()`: rest runs only in the lanes where `a` holds (it may index arrays that
        are out of bounds elsewhere)."""
        if not isinstance(a, np.ndarray):
            return rest() if a else a
        if self.if_(a):
            b = rest()
        else:
            b = False
        self.endif()
        return np.logical_and(a, b)

    def or_(self, a, rest):
        if not isinstance(a, np.ndarray):
            return a if a else rest()
        if self.if_(np.logical_not(a)):
            b = rest()
        else:
            b = False
        self.endif()
        return np.logical_or(a, b)

    def select(self, c, yes, no):
        """`yes() if c else no()`, each side evaluated only in its lanes."""
        if not isinstance(c, np.ndarray):
            return yes() if c else no()
        y = yes() if self.if_(c) else None
        n = no() if self.else_() else None
        self.endif()
        if y is None or n is None:
            return n if y is None else y
        dtypes = (_dtype(y), _dtype(n))
        out = np.where(c, y, n)
        return out if dtypes[0] == dtypes[1] else out  # numba unifies the branch types

    def math(self, py_fn, np_fn, *args):
        sig = simt_typing.signature(py_fn, tuple(_dtype(a) for a in args))
        if sig is None:
            raise SimtUnsupported(f"{getattr(py_fn, '__name__', py_fn)} on these types", self.line)
        arg_types, result = sig
        out = np_fn(*(cast(a, t) for a, t in zip(args, arg_types)))
        return cast(out, result)

    def item(self, seq, index):
        if isinstance(index, np.ndarray):
            raise SimtUnsupported("tuple indexed per lane", self.line)
        return seq[int(index)]

    def unpack(self, value, n):
        if not isinstance(value, tuple) or len(value) != n:
            raise SimtUnsupported("unpacking a value that is not a tuple", self.line)
        return value

    # --- builtins ------------------------------------------------------------------------------

    def builtin_min(self, *args):
        return self._minmax(min, np.minimum, args)

    def builtin_max(self, *args):
        return self._minmax(max, np.maximum, args)

    def _minmax(self, py_fn, np_fn, args):
        if len(args) == 1 and isinstance(args[0], tuple):
            args = args[0]
        sig = simt_typing.signature(py_fn, tuple(_dtype(a) for a in args))
        out = args[0]
        for a in args[1:]:
            out = np_fn(out, a)
        return cast(out, sig[1]) if sig is not None else out

    def builtin_abs(self, a):
        sig = simt_typing.signature(abs, (_dtype(a),))
        out = np.abs(a)
        return cast(out, sig[1]) if sig is not None else out

    def builtin_round(self, a, ndigits=None):
        if ndigits is None:
            return cast(np.round(a), np.dtype(np.int64))
        if _dtype(a).kind != "f":
            raise SimtUnsupported("round() of an integer with ndigits", self.line)
        return round_ndigits(a, ndigits)

    def builtin_complex(self, real=0.0, imag=0.0):
        dtypes = (_dtype(real), _dtype(imag))
        sig = simt_typing.signature(complex, dtypes)
        if sig is None:
            raise SimtUnsupported("complex() of these types", self.line)
        (tr, ti), result = sig
        out = np.asarray(cast(real, tr)).astype(result)
        out.imag = np.asarray(cast(imag, ti))
        return out if out.ndim else out[()]

    def part(self, value, name):
        """`z.real` / `z.imag` (of any number, as numba allows)."""
        if hasattr(value, "numba_type"):
            raise SimtUnsupported(f"attribute .{name} of an array", self.line)
        out = np.real(value) if name == "real" else np.imag(value)
        return out if isinstance(out, np.ndarray) and out.ndim else _dtype(out).type(out)

    def conjugate(self, value):
        return np.conjugate(value)

    def print_(self, *args):
        """`print(...)` in a kernel: one line per active lane, in lane order (blocks, then
        threads), each value as that lane holds it."""
        act, _, _ = self._lanes()
        lanes = range(self.n) if act is None else act.tolist()
        vector = [isinstance(a, np.ndarray) and a.ndim == 1 for a in args]
        for lane in lanes:
            print(*(a[lane] if v else a for a, v in zip(args, vector)))

    def builtin_len(self, a):
        shape = getattr(a, "shape", None)
        if shape is None:
            return np.int64(len(a))
        return shape[0]
