"""numba's types for one launch of the per-thread executor.

The kernel is typed by numba-cuda's own inference (`simt.typing.infer`, run on the CPU) for the
launch's argument types, and its code rewritten to follow those types (`rewrite`); each device
function is typed the same way for every argument-type signature it is called with, on first
use, as numba compiles it.

`for_launch` raises `TypingRefused` when numba's typing refuses the kernel (it would not
compile for a GPU); when inference is unavailable (numba's built-in CUDA target without
numba-cuda, no source) it returns a `Typer` whose `note` says why, and the code runs as written.
"""

from __future__ import annotations

import inspect
import types as pytypes

from .. import frozen
from ..simt import typing as simt_typing
from ..simt.typing import TypingRefused
from ..simt.unsupported import SimtUnsupported
from .rewrite import HELPERS, typed_code
from .values import value_key, value_type

__all__ = ["Typer", "TypingRefused", "for_launch"]


class TypedDevice:
    """A device function under the per-thread executor: its code follows numba's types for
    each argument-type signature it is called with (typed on first use, like numba compiles)."""

    __slots__ = ("func", "globals", "closure", "access", "constant", "module_constants", "_fns",
                 "__name__", "__qualname__")

    def __init__(self, func, new_globals, access: str | None = None):
        self.func, self.globals, self.closure = func, new_globals, func.__closure__
        self.access = access
        # a frozen value as the kernel sees it (`kernel_source._constant`), set by rebind
        self.constant = lambda value, name: value
        self.module_constants = lambda glb, attributes: {}  # (kernel_source.with_module_constants)
        self._fns: dict = {}
        self.__name__, self.__qualname__ = func.__name__, func.__qualname__

    def __call__(self, *args, **kwargs):
        if kwargs or len(args) != self.func.__code__.co_argcount:  # as numba folds them
            bound = inspect.signature(self.func).bind(*args, **kwargs)
            bound.apply_defaults()
            args = tuple(bound.arguments.values())
        key = tuple(map(value_key, args))
        fn = self._fns.get(key)
        if fn is None:
            fn = self._fns[key] = self._specialise(args)
        return fn(*args)

    def _specialise(self, args):
        func = self.func
        code = func.__code__
        fn_globals, closure = self.globals, self.closure
        try:
            argtypes = tuple(value_type(a) for a in args)
            types = simt_typing.infer(func, argtypes)
            typed = typed_code(func, types, "device", access=self.access)
        except (SimtUnsupported, TypeError, ImportError):
            typed = None  # the kernel was typed; this call runs as written
        else:  # what this signature's compile froze (frozen.py)
            frozen_now = frozen.constants(func, argtypes)
            if frozen_now.globals or frozen_now.attributes:
                fn_globals = dict(fn_globals)
                fn_globals.update({n: self.constant(v, n) for n, v in frozen_now.globals.items()})
                fn_globals.update(self.module_constants(fn_globals, frozen_now.attributes))
            if frozen_now.cells and closure:
                closure = tuple(pytypes.CellType(self.constant(frozen_now.cells[n], n))
                                if n in frozen_now.cells else c
                                for n, c in zip(code.co_freevars, closure))
        if typed is not None:
            code, consts = typed
            fn_globals.update(consts)
        fn = pytypes.FunctionType(code, fn_globals, func.__name__, func.__defaults__, closure)
        fn.__kwdefaults__ = func.__kwdefaults__
        return fn


class Typer:
    """numba's types for one launch of the per-thread executor (see the module doc)."""

    def __init__(self, types: simt_typing.FunctionTypes | None, note: str | None = None,
                 argtypes: tuple | None = None):
        self.types, self.note = types, note
        self.argtypes = argtypes  # the launch's argument types (what a compile is keyed by)
        self.globals = dict(HELPERS)
        # compiled element accesses (`access`): None, "count" or "record"; set by the
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
    return Typer(types, argtypes=argtypes)
