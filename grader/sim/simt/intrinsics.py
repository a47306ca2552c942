"""The table of what a kernel may name: each numba.cuda / math / builtin object the lockstep
executor models, and how the transform should emit it.

Resolution is by identity with the real objects (`numba.cuda.syncthreads`, `math.sqrt`, ...),
so `from numba import cuda`, `import numba.cuda as cu` and `from math import sqrt` all work.
"""

from __future__ import annotations

import builtins
import cmath
import importlib
import math
from dataclasses import dataclass

import numpy as np

from ..device_math import FP16


@dataclass(frozen=True)
class Intrinsic:
    kind: str  # "ctx" (a Ctx method), "dim", "value", "atomic", "math", "cast", "builtin"
    name: str
    payload: object = None


DIMS = ("threadIdx", "blockIdx", "blockDim", "gridDim")
CTX_FUNCTIONS = (
    "grid", "gridsize", "syncthreads", "syncthreads_count", "syncthreads_and", "syncthreads_or",
    "syncwarp", "threadfence", "threadfence_block", "threadfence_system", "shfl_sync",
    "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync", "ballot_sync", "all_sync", "any_sync",
    "eq_sync", "match_any_sync", "match_all_sync", "activemask", "lanemask_lt", "popc", "clz",
    "ffs", "brev", "fma", "cbrt", "selp",
)
ATOMICS = ("add", "sub", "max", "min", "nanmax", "nanmin", "inc", "dec", "exch", "cas",
           "compare_and_swap", "and_", "or_", "xor")
# what reads or orders lanes by their position in the batch: never under lane compaction
LANE_POSITIONED = frozenset(CTX_FUNCTIONS) - {
    "grid", "gridsize", "threadfence", "threadfence_block", "threadfence_system", "popc", "clz",
    "ffs", "brev", "fma", "cbrt", "selp"}
BARRIERS = ("syncthreads", "syncthreads_count", "syncthreads_and", "syncthreads_or")


def _vectorized(fn):
    return np.vectorize(fn, otypes=[np.float64])


MATH = {
    "sqrt": np.sqrt, "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log,
    "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "sin": np.sin, "cos": np.cos,
    "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "atan2": np.arctan2,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "fabs": np.fabs, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
    "pow": np.power, "hypot": np.hypot, "copysign": np.copysign, "fmod": np.fmod,
    "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite, "degrees": np.degrees,
    "radians": np.radians, "erf": _vectorized(math.erf), "erfc": _vectorized(math.erfc),
    "gamma": _vectorized(math.gamma), "lgamma": _vectorized(math.lgamma),
}
NUMPY_UFUNCS = ("sqrt", "exp", "log", "sin", "cos", "tan", "tanh", "floor", "ceil", "fabs",
                "absolute", "abs", "minimum", "maximum", "power", "arctan2", "isnan", "isinf")
BUILTINS = ("min", "max", "abs", "len", "range", "round", "complex")
CMATH = {"exp": np.exp, "log": np.log, "log10": np.log10, "sqrt": np.sqrt, "sin": np.sin,
         "cos": np.cos, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
         "phase": np.angle, "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite}

_table: dict | None = None


def _build() -> dict:
    from numba import cuda

    table = {}

    def add(obj, intrinsic):
        table[id(obj)] = (obj, intrinsic)

    for name in DIMS:
        add(getattr(cuda, name), Intrinsic("dim", name))
    for name in CTX_FUNCTIONS:
        if hasattr(cuda, name):
            add(getattr(cuda, name), Intrinsic("ctx", name))
    for name in ("laneid", "warpsize"):
        add(getattr(cuda, name), Intrinsic("value", name))
    cg = getattr(cuda, "cg", None)  # cooperative groups (numba-cuda)
    if cg is not None:
        add(cg.this_grid, Intrinsic("ctx", "this_grid"))
    add(cuda.shared.array, Intrinsic("ctx", "shared_array"))
    add(cuda.local.array, Intrinsic("ctx", "local_array"))
    add(cuda.const.array_like, Intrinsic("ctx", "const_array_like"))
    for name in ATOMICS:
        if hasattr(cuda.atomic, name):
            add(getattr(cuda.atomic, name), Intrinsic("atomic", name.rstrip("_")))
    for name, fn in MATH.items():
        if hasattr(math, name):
            add(getattr(math, name), Intrinsic("math", name, (getattr(math, name), fn)))
    for name, fn in CMATH.items():  # typed by numba's signatures (complex in, complex out)
        add(getattr(cmath, name), Intrinsic("math", name, (getattr(cmath, name), fn)))
    for name in NUMPY_UFUNCS:
        fn = getattr(np, name)
        add(fn, Intrinsic("math", name, (fn, fn)))
    for name in BUILTINS:
        add(getattr(builtins, name), Intrinsic("builtin", name))
    for pytype, dtype in ((int, np.int64), (float, np.float64), (bool, np.bool_)):
        add(pytype, Intrinsic("cast", pytype.__name__, np.dtype(dtype)))
    fp16 = fp16_module()
    for name, fn in FP16.items():  # typed by numba's signatures (float16), like math
        real = getattr(fp16, name, None)
        if real is not None:
            add(real, Intrinsic("math", name, (real, fn)))
    return table


def fp16_module():
    """numba-cuda's `numba.cuda.fp16` (what `cuda.fp16` is), or None."""
    try:
        return importlib.import_module("numba.cuda.fp16")
    except Exception:  # numba's built-in CUDA target, or no half-precision support
        return None


def lookup(obj) -> Intrinsic | None:
    """The intrinsic `obj` is, a cast for numba/numpy scalar types, or None."""
    global _table
    if _table is None:
        _table = _build()
    hit = _table.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1]
    dtype = scalar_dtype(obj)
    if dtype is not None:
        return Intrinsic("cast", str(dtype), dtype)
    return None


def scalar_dtype(obj) -> np.dtype | None:
    """numpy dtype of a numba scalar type (`float32`) or numpy scalar class (`np.float32`)."""
    if isinstance(obj, type) and issubclass(obj, np.generic) and obj is not np.generic:
        try:
            return np.dtype(obj)
        except TypeError:
            return None
    try:
        from numba.core import types
    except ImportError:
        return None
    if isinstance(obj, (types.Integer, types.Float, types.Boolean, types.Complex)):
        from .typing import as_dtype

        return as_dtype(obj)
    return None
