"""Global and closure values as numba freezes them into a compiled kernel.

numba-cuda compiles a kernel once per argument-type signature (a device function once per
signature of its own), and the module globals and closure variables its code names become
constants of that compile: a NumPy array is copied into the kernel's constant memory (numba
types it as a read-only array: a store into it does not compile), a number is folded in.
Changing the array afterwards changes nothing for that specialization, while a launch with new
argument types compiles anew and takes the values of that moment.

`constants(func, argtypes)` gives those values, captured at the first call for a signature and
kept (arrays copied once, read-only) for as long as the function lives; a kernel declared with
signatures (`cuda.jit("void(float32[:])")`) is compiled at decoration, for every launch:
`declare(func)` captures them there. The simulator keys them by the Python function rather
than by the dispatcher: a function jitted twice shares them.
"""

from __future__ import annotations

import types
import weakref
from dataclasses import dataclass, field

import numpy as np

from .kernel_graph import code_names

__all__ = ["Constants", "constants", "declare"]


@dataclass
class Constants:
    """What one compile of a function froze: its globals and its closure cells, by name, and
    the arrays it reads as attributes of a module it names (`tables.WEIGHTS`), by (global
    name, attribute)."""

    globals: dict = field(default_factory=dict)
    cells: dict = field(default_factory=dict)
    attributes: dict = field(default_factory=dict)


_store: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # function -> {argtypes: Constants}
_NOT_CONSTANT = object()
_DECLARED = "declared"  # the key of what a compile at decoration froze


def declare(func) -> None:
    """`func` was compiled at decoration for the signatures it declares: its values are
    captured now (once), for every launch."""
    per_signature = _store.get(func)
    if per_signature is None:
        per_signature = _store[func] = {}
    if _DECLARED not in per_signature:
        per_signature[_DECLARED] = _capture(func)


def constants(func, argtypes) -> Constants:
    """The globals and closure values of `func` frozen by its compile for `argtypes` (numba
    types of the arguments, hashable): captured now if this is the first call for them."""
    per_signature = _store.get(func)
    if per_signature is None:
        per_signature = _store[func] = {}
    hit = per_signature.get(_DECLARED) or per_signature.get(argtypes)
    if hit is None:
        hit = per_signature[argtypes] = _capture(func)
    return hit


def _capture(func) -> Constants:
    out = Constants()
    glb = func.__globals__
    names = code_names(func.__code__)
    for name in names:
        if name in glb:
            value = _frozen(glb[name])
            if value is not _NOT_CONSTANT:
                out.globals[name] = value
            elif isinstance(glb[name], types.ModuleType) and name not in func.__code__.co_freevars \
                    and not glb[name].__name__.startswith(("numba", "numpy", "math", "cmath")):
                for attr in names:
                    member = vars(glb[name]).get(attr)  # (no lazy attribute runs)
                    if isinstance(member, np.ndarray):
                        out.attributes[name, attr] = _frozen(member)
    for name, cell in zip(func.__code__.co_freevars, func.__closure__ or ()):
        try:
            value = _frozen(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
        if value is not _NOT_CONSTANT:
            out.cells[name] = value
    return out


def _frozen(value):
    """`value` as a compile freezes it (arrays: a read-only copy), or _NOT_CONSTANT for what
    the simulator leaves live (functions, modules, ...)."""
    if isinstance(value, np.ndarray):
        copy = value.copy()
        copy.flags.writeable = False
        return copy
    if isinstance(value, tuple) and type(value) is tuple and any(
            isinstance(v, np.ndarray) for v in value):
        items = tuple(_frozen(v) for v in value)
        return _NOT_CONSTANT if any(v is _NOT_CONSTANT for v in items) else items
    if isinstance(value, (bool, int, float, complex, np.generic)) or \
            isinstance(value, tuple) and all(isinstance(v, (bool, int, float, complex, np.generic))
                                             for v in value):
        return value  # immutable: kept as the compile saw it, should the name be rebound
    return _NOT_CONSTANT
