"""Eager signatures: `cuda.jit("void(int32[:], int32)")(kernel)` while the simulator is installed.

numba compiles such a kernel at decoration, so
- a kernel numba cannot type fails in the decorator, with numba's `TypingError`, before any
  launch (the simulator runs numba-cuda's type inference for the declared types on the CPU);
- a launch converts each argument to the declared type: a Python int given for an `int32`
  parameter becomes a 32-bit value (wrapping like a C cast: 0xFFFFFFFF is -1), a float given
  for a `float32` one is rounded to float32. The simulator converts scalar arguments the same
  way before typing the launch (arrays are passed as they are, as numba passes them).

`Signatures` (one per installation) holds the declared argument types of each dispatcher; the
`compile` that `patching` puts in place of numba's calls `declare`.

Compiled code (`kernel.inspect_llvm()`, `inspect_asm()`, `inspect_lto_ptx()`) needs no GPU:
`inspect` builds numba-cuda's own kernel object for a signature the first time one is asked for
(NVVM runs on the CPU, nothing is loaded on a device), for the simulated device's compute
capability, and keeps it. Device functions compiled on the way are removed from their
dispatchers after (`patching.compile_check_device`), as after a compile check.
"""

from __future__ import annotations

import weakref

import numpy as np

__all__ = ["Signatures"]


class Signatures:
    """The argument types declared for each eagerly compiled dispatcher."""

    def __init__(self, current_device=None):
        self._declared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._device = current_device  # the simulated device kernels are compiled for

    def declare(self, dispatcher, sig) -> None:
        """Record `sig` (what numba's `CUDADispatcher.compile` takes: argument types, or a
        signature string / object) for `dispatcher` and type the kernel for it: numba's
        TypingError propagates from here, as from a real decorator."""
        from numba.cuda.core import sigutils

        argtypes, _ = sigutils.normalize_signature(sig)
        argtypes = tuple(argtypes)
        known = self._declared.setdefault(dispatcher, [])
        if argtypes not in known:
            known.append(argtypes)
        _type_at_decoration(dispatcher.py_func, argtypes)

    def declared(self, dispatcher) -> list[tuple]:
        return list(self._declared.get(dispatcher, ()))

    def inspect(self, dispatcher, kind: str, signature=None):
        """What numba's `dispatcher.inspect_<kind>(signature)` returns for a kernel: the code
        for `signature`, or {argument types: code} over the declared signatures."""
        from numba.cuda.core import sigutils

        if signature is None:
            return {argtypes: self.inspect(dispatcher, kind, argtypes)
                    for argtypes in self.declared(dispatcher)}
        argtypes = tuple(sigutils.normalize_signature(signature)[0])
        kernel, cc = self._kernel(dispatcher, argtypes)
        if kind == "llvm":
            return kernel.inspect_llvm()
        if kind == "asm":
            return kernel.inspect_asm(cc)
        if kind == "lto_ptx":
            return kernel.inspect_lto_ptx(cc)
        raise ValueError(f"no compiled code of kind {kind!r}")

    def _kernel(self, dispatcher, argtypes: tuple):
        compiled = self._compiled.setdefault(dispatcher, {})
        hit = compiled.get(argtypes)
        if hit is None:
            from numba.cuda.dispatcher import _Kernel

            from . import patching

            cc = tuple(self._device().compute_capability)
            with patching.compile_check_device(cc, patching.device_dispatchers(
                    dispatcher.py_func)):
                kernel = _Kernel(dispatcher.py_func, argtypes, **dispatcher.targetoptions)
            hit = compiled[argtypes] = (kernel, cc)
        return hit

    def convert(self, dispatcher, args) -> tuple:
        """`args` with each scalar converted to the type declared for its parameter (the first
        declared signature the arguments fit); unchanged without a declared signature."""
        for argtypes in self._declared.get(dispatcher, ()):
            if _fits(argtypes, args):
                return tuple(_convert(v, t) for v, t in zip(args, argtypes))
        return tuple(args)


def _type_at_decoration(py_func, argtypes: tuple) -> None:
    try:
        from .simt.typing import TypingRefused, infer
        from .simt.unsupported import SimtUnsupported
    except ImportError:  # numba's built-in CUDA target: no CPU typing, nothing checked here
        return
    try:
        infer(py_func, argtypes)
    except TypingRefused as exc:
        if exc.py_func is py_func:
            raise exc.error from None
    except (SimtUnsupported, ImportError):
        pass  # not typeable on the CPU here: the launch decides, as without a signature


def _scalar_dtype(nbtype) -> np.dtype | None:
    from numba.core import types

    if isinstance(nbtype, (types.Boolean, types.Integer, types.Float, types.Complex)):
        from numba.np import numpy_support

        return numpy_support.as_dtype(nbtype)
    return None


def _is_array(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and np.ndim(value) > 0


def _fits(argtypes: tuple, args) -> bool:
    from numba.core import types

    if len(argtypes) != len(args):
        return False
    for value, nbtype in zip(args, argtypes):
        if isinstance(nbtype, types.Array):
            if not _is_array(value) or len(value.shape) != nbtype.ndim:
                return False
            dtype = _scalar_dtype(nbtype.dtype)
            if dtype is not None and np.dtype(value.dtype) != dtype:
                return False
        elif _scalar_dtype(nbtype) is not None and not isinstance(
                value, (bool, int, float, complex, np.bool_, np.number)):
            return False
    return True


def _convert(value, nbtype):
    dtype = _scalar_dtype(nbtype)
    if dtype is None or not isinstance(value, (bool, int, float, complex, np.bool_, np.number)):
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
