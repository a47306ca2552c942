"""Values as numba types them, for the per-thread executor: casts, conversions, operations.

The per-thread executor runs a kernel's own Python code, and Python and numpy promote
differently from numba: numba computes `int32 + int32` in int64, keeps `acc = 0.0` in float64
when every addend is float32, and compares a float32 with a float literal in float64. The
typed rewrite (`rewrite`) makes the code call these helpers, which follow numba's typing
context (`simt.typing.signature`):

    cast(value, t)      a value held as numba's type `t` holds it (`representation(t)`)
    binop(fn, a, b)     `fn(a, b)` with the operand and result types numba picks (a plan per
    unop(fn, a)         operand classes, learnt once); `static_plan` decides it at rewrite time
                        where the classes are known before running
    converter(t)        a conversion to `t` with C's wrap-around for Python ints

Python ints stay Python ints where numba's type is a signed integer or an unsigned one narrower
than 64 bits: in every operation numba promotes those to int64, which is how `binop` treats a
Python int (values are wrapped to the type's range on assignment). `value_type` gives the numba
type of a runtime value (a launch's argument, a device function's).
"""

from __future__ import annotations

import operator

import numpy as np

from ..simt import typing as simt_typing

_PY_DTYPES = {int: np.dtype(np.int64), float: np.dtype(np.float64), bool: np.dtype(np.bool_),
              complex: np.dtype(np.complex128)}
# integer types whose values a Python int represents faithfully (numba promotes them to int64)
_PY_INT_RANGE = {t: (int(np.iinfo(t).min), int(np.iinfo(t).max)) for t in (
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32)}
DIRECT = None  # plan: compute as is


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
_converted_to: dict = {}  # converter -> its numpy type (`converted_type`)


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


def converted_type(conv):
    """The numpy type a `converter` converts to."""
    return _converted_to[conv]


_plans: dict = {}


def _plan(fn, classes):
    """(operand casts, result cast) that make numpy compute `fn` as numba does, or DIRECT."""
    dtypes = tuple(_dtype_of_class(c) for c in classes)
    if any(d is None for d in dtypes):
        return DIRECT
    sig = simt_typing.signature(fn, dtypes)
    if sig is None:
        return DIRECT
    targets, result = sig
    casts = tuple(None if d == a else converter(a.type) for d, a in zip(dtypes, targets))
    samples = tuple(c(1) if k is None else k(1) for c, k in zip(classes, casts))
    try:
        out = fn(*samples)
    except Exception:  # noqa: BLE001 - nothing to learn from the sample: compute as is
        return DIRECT
    got = _dtype_of_class(out.__class__)
    result_cast = None if got == result else converter(result.type)
    if result_cast is None and all(k is None for k in casts):
        return DIRECT
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
            if plan is DIRECT:
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
    if plan is DIRECT:
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
    if plan is DIRECT:
        return fn(a)
    (ca,), cr = plan
    out = fn(a if ca is None else ca(a))
    return out if cr is None else cr(out)


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


def value_key(value):
    """What decides a device function's typed code: the classes of its arguments (dtype,
    dimensions and memory space of an array)."""
    cls = value.__class__
    if isinstance(value, tuple):
        key = tuple(value_key(v) for v in value)
        return key if cls is tuple else (cls, key)
    if _dtype_of_class(cls) is not None:
        return cls
    return cls, getattr(value, "dtype", None), getattr(value, "ndim", None), \
        getattr(value, "_space", None)
