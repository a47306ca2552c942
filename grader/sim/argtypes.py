"""How a launch argument is typed: the numba type a host value gets as a kernel argument.

One place for what numba-cuda's dispatcher does with the arguments of `kernel[grid, block](...)`:
- without a declared signature it types each value (`numba_type_of`: numpy arrays, device
  arrays, `__cuda_array_interface__` objects, Python and numpy scalars); the executors receive a
  Python scalar as the numpy scalar of that type (`launch_scalar`);
- with declared signatures (`cuda.jit("void(int32[:], int32)")`, `declared_argtypes`) it takes
  the first one the values fit (`fits_declared`) and converts each scalar to its declared type
  (`to_declared`).
The compile check, eager signatures and the launcher use these; the executors build the numba
types of their runtime values with `scalar_type` / `array_type` (see `simt.typing`).

numba is imported lazily: the grader imports the simulator without it.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from . import numba_target

__all__ = ["numba_type_of", "argtypes_for", "launch_scalar", "declared_argtypes", "fits_declared",
           "to_declared", "scalar_type", "array_type", "scalar_dtype"]

_NUMBERS = (bool, int, float, complex, np.bool_, np.number)


# ---------------------------------------------------------------- numba's own pieces
def _numpy_support():
    return numba_target.typing_modules().numpy_support


def _numba_typeof(value):
    """numba-cuda's own argument typing (what its dispatcher uses); None if it cannot."""
    from numba.core import types

    target = numba_target.typing_modules()
    try:
        t = target.typeof(value, target.Purpose.argument)
    except Exception:  # noqa: BLE001 - the caller falls back to its own rules
        return None
    return None if t is None or t == types.pyobject else t


def scalar_type(dtype):
    """The numba type of a numpy dtype (`float32`, a `Record` for a structured dtype)."""
    return _numpy_support().from_dtype(np.dtype(dtype))


def array_type(dtype, ndim: int, layout: str = "C", readonly: bool = False):
    """`array(dtype, ndim, layout)` as numba types it."""
    from numba.core import types

    return types.Array(scalar_type(dtype), int(ndim), layout, readonly=readonly)


def scalar_dtype(nbtype) -> np.dtype | None:
    """The numpy dtype of a numba scalar type (boolean, integer, float, complex; literals by
    their type); None for arrays, tuples and any other type."""
    from numba.core import types

    nbtype = types.unliteral(nbtype)
    if isinstance(nbtype, (types.Boolean, types.Integer, types.Float, types.Complex)):
        return _numpy_support().as_dtype(nbtype)
    return None


# ---------------------------------------------------------------- typed by value
def numba_type_of(value: Any):
    """The numba type a kernel argument gets on the GPU: numpy arrays as numba types
    them (``array(float32, 1d, C)``), Python ints ``int64``, floats ``float64``, numpy
    scalars their dtype, numba device arrays their own ``_numba_type_``; other device
    arrays with ``dtype``/``ndim`` (the simulator's, which stand in for numba's
    ``DeviceNDArray``) by dtype, ndim and contiguity; third-party
    ``__cuda_array_interface__`` objects (CuPy) as numba-cuda types them."""
    from numba.core import types

    if isinstance(value, types.Type):
        return value
    nt = getattr(value, "_numba_type_", None)
    if isinstance(nt, types.Type):
        return nt
    if isinstance(value, (np.ndarray, np.generic, bool, int, float, complex)):
        return _numba_typeof(value)
    if hasattr(value, "dtype") and hasattr(value, "ndim"):
        dtype = np.dtype(value.dtype)
        return array_type(dtype, int(value.ndim), _array_layout(value, dtype))
    cai = getattr(value, "__cuda_array_interface__", None)
    if isinstance(cai, dict):
        t = _numba_typeof(value)
        if t is not None:
            return t
        dtype = np.dtype(cai["typestr"])
        shape = tuple(cai["shape"])
        return array_type(dtype, len(shape), _layout(shape, cai.get("strides"), dtype.itemsize),
                          readonly=bool(cai.get("data", (0, False))[1]))
    data = getattr(value, "data", None)
    if hasattr(data, "dtype") and hasattr(data, "ndim"):
        return numba_type_of(data)  # a DeviceBuffer-like wrapper of the backing ndarray
    t = _numba_typeof(value)
    if t is not None:
        return t
    raise TypeError(f"cannot type a kernel argument of type {type(value).__name__}")


def argtypes_for(args: Iterable[Any]) -> tuple:
    """``numba_type_of`` of each launch argument."""
    return tuple(numba_type_of(a) for a in args)


def launch_scalar(value):
    """A host scalar (or a tuple of them) as the numpy scalar of the type `numba_type_of` gives
    it (a Python int: int64, a float: float64, a bool: bool_); anything else unchanged."""
    if isinstance(value, tuple):
        items = tuple(launch_scalar(v) for v in value)
        # a namedtuple keeps its class: numba types it as a named tuple (fields by name)
        return type(value)(*items) if hasattr(type(value), "_fields") else items
    if isinstance(value, (bool, np.bool_)):
        return np.bool_(value)
    if isinstance(value, (np.integer, np.floating, np.complexfloating)):
        return value
    if isinstance(value, (int, float, complex)):
        t = _numba_typeof(value)
        if t is None:  # an int beyond 64 bits, which numba refuses too: numpy's OverflowError
            return np.int64(value)
        return scalar_dtype(t).type(value)
    return value


def _array_layout(value, dtype) -> str:
    if callable(getattr(value, "is_c_contiguous", None)):
        if value.is_c_contiguous():
            return "C"
        f = getattr(value, "is_f_contiguous", None)
        return "F" if callable(f) and f() else "A"
    flags = getattr(value, "flags", None)
    if flags is not None:
        try:
            return "C" if flags["C_CONTIGUOUS"] else "F" if flags["F_CONTIGUOUS"] else "A"
        except (KeyError, TypeError):
            pass
    shape = tuple(getattr(value, "shape", (0,) * int(value.ndim)))
    return _layout(shape, getattr(value, "strides", None), dtype.itemsize)


def _layout(shape, strides, itemsize: int) -> str:
    if strides is None:
        return "C"
    # C-contiguous?
    expect, c_ok = itemsize, True
    for dim, st in zip(reversed(shape), reversed(strides)):
        if dim > 1 and st != expect:
            c_ok = False
        expect *= dim
    if c_ok:
        return "C"
    expect, f_ok = itemsize, True
    for dim, st in zip(shape, strides):
        if dim > 1 and st != expect:
            f_ok = False
        expect *= dim
    return "F" if f_ok else "A"


# ---------------------------------------------------------------- typed by a declared signature
def declared_argtypes(sig) -> tuple:
    """The argument types of a declared signature (what numba's `CUDADispatcher.compile` takes:
    argument types, or a signature string / object)."""
    argtypes, _ = numba_target.typing_modules().sigutils.normalize_signature(sig)
    return tuple(argtypes)


def _is_array(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and np.ndim(value) > 0


def fits_declared(argtypes: tuple, args) -> bool:
    """Whether a launch's `args` fit the declared `argtypes`: arrays of the declared ndim and
    dtype where arrays are declared, numbers where scalars are."""
    from numba.core import types

    if len(argtypes) != len(args):
        return False
    for value, nbtype in zip(args, argtypes):
        if isinstance(nbtype, types.Array):
            if not _is_array(value) or len(value.shape) != nbtype.ndim:
                return False
            dtype = scalar_dtype(nbtype.dtype)
            if dtype is not None and np.dtype(value.dtype) != dtype:
                return False
        elif scalar_dtype(nbtype) is not None and not isinstance(value, _NUMBERS):
            return False
    return True


def to_declared(value, nbtype):
    """A scalar `value` converted to the declared scalar type `nbtype` as numba converts it
    (integers wrap like a C cast: 0xFFFFFFFF for an int32 is -1; a float for an integer is
    truncated; floats are rounded to the type); arrays and other values unchanged."""
    dtype = scalar_dtype(nbtype)
    if dtype is None or not isinstance(value, _NUMBERS):
        return value
    if dtype.kind in "iu" and isinstance(value, (bool, int, np.bool_, np.integer)):
        bits = dtype.itemsize * 8
        v = int(value) & ((1 << bits) - 1)
        if dtype.kind == "i" and v >= 1 << (bits - 1):
            v -= 1 << bits
        return dtype.type(v)
    if dtype.kind == "b":
        return np.bool_(bool(value))
    if dtype.kind in "iu":  # a float for an integer parameter: truncated, as a C cast
        return dtype.type(int(value))
    return dtype.type(value)
