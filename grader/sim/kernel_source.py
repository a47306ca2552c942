"""A kernel's Python function, rebound to a simulated `cuda` without touching its module.

`rebind(func, fake_cuda)` returns a new function object with the same code, defaults and
closure, whose globals are a *copy* of the original's in which:
- the `numba.cuda` module is the fake `cuda`, the `numba` module a proxy whose `.cuda` is the fake;
- objects imported from `numba.cuda` by name (`from numba.cuda import grid`) are the fake's;
- CUDA dispatchers (device functions, kernels) are their `py_func`, rebound the same way.
The module itself is never modified, so another host thread or an un-simulated caller sees the
original names.
"""

from __future__ import annotations

import inspect
import math
import types

import numpy as np

from . import patching


class KernelSource:
    """What the simulator needs to know about a dispatcher's Python function."""

    def __init__(self, dispatcher):
        self.dispatcher = dispatcher
        self.py_func = dispatcher.py_func
        code = self.py_func.__code__
        self.name = self.py_func.__name__
        self.qualname = self.py_func.__qualname__
        self.filename = code.co_filename
        self.firstlineno = code.co_firstlineno
        self.params = list(inspect.signature(self.py_func).parameters)


class NumbaProxy(types.ModuleType):
    """Stands for the `numba` module in a kernel's globals: `numba.cuda` is the fake."""

    def __init__(self, fake_cuda):
        super().__init__("numba")
        self.cuda = fake_cuda

    def __getattr__(self, name):
        return getattr(patching.numba_module(), name)


class MathShim(types.ModuleType):
    """`math` for kernels: float32 in gives float32 out, as numba types it."""

    def __init__(self):
        super().__init__("math")

    def __getattr__(self, name):
        fn = getattr(math, name)
        if not callable(fn):
            return fn

        def typed(*args, _fn=fn):
            out = _fn(*args)
            if isinstance(out, float) and args and all(
                    isinstance(a, np.float32) for a in args):
                return np.float32(out)
            return out

        typed.__name__ = name
        setattr(self, name, typed)
        return typed


_MATH_SHIM = MathShim()


def _replacement(value, fake_cuda, cache, real_attrs):
    """The simulated stand-in for one global or closure value, or `value` itself."""
    if isinstance(value, types.ModuleType):
        if value is patching.cuda_module():
            return fake_cuda
        if value is patching.numba_module():
            return NumbaProxy(fake_cuda)
        if value is math:
            return _MATH_SHIM
        return value
    if patching.is_dispatcher(value):
        return rebind(value.py_func, fake_cuda, cache)
    name = real_attrs.get(id(value))
    if name is not None:
        return getattr(fake_cuda, name)
    if getattr(value, "__module__", None) == "math" and callable(value):
        return getattr(_MATH_SHIM, value.__name__, value)
    return value


def rebind(func, fake_cuda, cache: dict | None = None):
    """`func` with a globals copy in which numba's CUDA names are simulated (see module doc).

    `cache` maps original functions to their rebound twins for one launch; it makes shared and
    recursive device functions resolve to one object each.
    """
    cache = {} if cache is None else cache
    hit = cache.get(func)
    if hit is not None:
        return hit
    real_attrs = cache.setdefault("__real_attrs__", patching.cuda_attribute_names(fake_cuda))
    new_globals = dict(func.__globals__)
    closure = func.__closure__
    fn = types.FunctionType(func.__code__, new_globals, func.__name__, func.__defaults__,
                            closure)
    cache[func] = fn  # before recursing: a recursive device function finds itself
    for name in func.__code__.co_names:
        if name in new_globals:
            new_globals[name] = _replacement(new_globals[name], fake_cuda, cache, real_attrs)
    if closure:
        cells = tuple(types.CellType(_replacement(c.cell_contents, fake_cuda, cache, real_attrs))
                      if _has_contents(c) else c for c in closure)
        fn = types.FunctionType(func.__code__, new_globals, func.__name__, func.__defaults__,
                                cells)
        cache[func] = fn
    fn.__kwdefaults__ = func.__kwdefaults__
    fn.__qualname__ = func.__qualname__
    return fn


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True
