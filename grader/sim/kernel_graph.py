"""A kernel's function graph: the functions it reaches through the names its code uses.

numba compiles, with a kernel, every jitted function the kernel calls, found through the
globals its code names, its closure cells and the attributes of modules it names (`helpers.f`).
`walk(func, follow)` visits that graph once for everyone who needs it:
- `device_dispatchers(func)`: the jitted functions reached (CUDA dispatchers and CPU-jitted
  helpers, which numba-cuda compiles as device functions), numba's own included: whose
  overloads a compile for a stand-in device adds (`patching.typing_device`, `eager`);
- `user_functions(func)`: the jitted functions of the kernel's author (numba's own library
  left out): what the compile check fingerprints and where it looks for the student's line.

"Dispatcher" is numba's word for a jitted function object, and it has two meanings here, one
predicate each:
- `is_cuda_dispatcher(obj)`: what `@cuda.jit` returns, a kernel or a device function (an
  instance of numba's CUDA dispatcher class): what launches, `kernel_source.rebind`, the
  kernel package and the lockstep transform take for one;
- `is_numba_dispatcher(obj)`: any numba-jitted function, whatever its target (`@cuda.jit`,
  and `@numba.njit`, which numba-cuda compiles as a device function of a kernel that calls
  it), recognised by its shape (a Python `py_func` and jit `targetoptions`): what the compile
  check follows, and what both executors call as a device function.
"""

from __future__ import annotations

import importlib
import os
import types
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["KernelGraph", "FunctionNode", "walk", "device_dispatchers", "user_functions",
           "is_cuda_dispatcher", "is_numba_dispatcher", "dispatcher_classes", "code_names",
           "references", "python_function"]


# ---------------------------------------------------------------- the two kinds of dispatcher
def dispatcher_classes() -> list[type]:
    """numba's CUDA dispatcher classes present in this process (usually exactly one)."""
    classes = []
    for modname in ("numba.cuda.dispatcher", "numba_cuda.numba.cuda.dispatcher"):
        try:
            mod = importlib.import_module(modname)
        except Exception:
            continue
        cls = getattr(mod, "CUDADispatcher", None)
        if isinstance(cls, type) and cls not in classes:
            classes.append(cls)
    return classes


_CUDA_DISPATCHERS: tuple[type, ...] | None = None


def is_cuda_dispatcher(obj) -> bool:
    """Whether `obj` is a `@cuda.jit` kernel or device function."""
    global _CUDA_DISPATCHERS
    if _CUDA_DISPATCHERS is None:
        _CUDA_DISPATCHERS = tuple(dispatcher_classes())
    return isinstance(obj, _CUDA_DISPATCHERS) and hasattr(obj, "py_func")


def is_numba_dispatcher(obj) -> bool:
    """Whether `obj` is a numba-jitted function of any target (`@cuda.jit`, `@numba.njit`)."""
    return (not isinstance(obj, type) and hasattr(obj, "py_func")
            and isinstance(getattr(obj, "py_func", None), types.FunctionType)
            and hasattr(obj, "targetoptions"))


def _from_numba(func) -> bool:
    """Whether `func` is numba's own (defined in numba's or numba-cuda's modules)."""
    mod = getattr(func, "__module__", "") or ""
    return mod.startswith(("numba.", "numba_cuda"))


def _users_dispatcher(obj) -> bool:
    return is_numba_dispatcher(obj) and not _from_numba(obj.py_func)


# ---------------------------------------------------------------- one function's references
def python_function(kernel) -> types.FunctionType:
    """The Python function of a kernel (a dispatcher, or the function itself)."""
    f = getattr(kernel, "py_func", kernel)
    if not isinstance(f, types.FunctionType):
        raise TypeError(f"expected a @cuda.jit kernel or a Python function, got {type(kernel)!r}")
    return f


def code_names(code: types.CodeType) -> list[str]:
    """The names `code` uses (globals and attributes), nested code (comprehensions, inner
    functions) included; each once, in order of first use."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += code_names(const)
    return list(dict.fromkeys(names))


def references(fn: types.FunctionType) -> dict[str, Any]:
    """{name: value} of the globals `fn`'s code names and of its closure cells that are set (a
    closure cell hides a global of its name)."""
    glb = fn.__globals__
    refs = {n: glb[n] for n in code_names(fn.__code__) if n in glb}
    for n, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            refs[n] = cell.cell_contents
        except ValueError:  # not yet assigned
            pass
    return refs


@dataclass
class FunctionNode:
    """One function of the graph and what its code refers to."""

    func: types.FunctionType
    names: list[str]  # code_names(func.__code__)
    references: dict[str, Any]  # references(func)

    def module_attributes(self, module: types.ModuleType) -> dict[str, Any]:
        """{name: value} of the attributes of `module` that this function's code names (its
        submodules and dunder names left out), by name."""
        out = {}
        for attr in sorted(self.names):
            value = getattr(module, attr, None) if not attr.startswith("__") else None
            if value is not None and not isinstance(value, types.ModuleType):
                out[attr] = value
        return out


@dataclass
class KernelGraph:
    """The functions `walk` visited (the root first) and the dispatchers it followed."""

    follows: Callable[[Any], bool]
    functions: list[FunctionNode] = field(default_factory=list)
    dispatchers: list = field(default_factory=list)  # each once, in order of discovery

    @property
    def files(self) -> set[str]:
        """The source files of the functions visited (absolute paths)."""
        return {os.path.abspath(node.func.__code__.co_filename) for node in self.functions}


# ---------------------------------------------------------------- the walk
def walk(func: types.FunctionType, follow: Callable[[Any], bool]) -> KernelGraph:
    """`func` and every function it reaches through a value `follow` accepts (a dispatcher,
    whose `py_func` is visited in turn): a global its code names, a closure cell, or an
    attribute of a module it names. Depth first, by name; each function visited once."""
    graph = KernelGraph(follow)
    seen: set[int] = set()
    found: set[int] = set()
    stack = [func]
    while stack:
        fn = stack.pop()
        if id(fn) in seen or not isinstance(fn, types.FunctionType):
            continue
        seen.add(id(fn))
        node = FunctionNode(fn, code_names(fn.__code__), references(fn))
        graph.functions.append(node)
        for name in sorted(node.references):
            value = node.references[name]
            reached = node.module_attributes(value).values() \
                if isinstance(value, types.ModuleType) else (value,)
            for v in reached:
                if follow(v):
                    if id(v) not in found:
                        found.add(id(v))
                        graph.dispatchers.append(v)
                    stack.append(v.py_func)
    return graph


_foreign: "weakref.WeakKeyDictionary[types.FunctionType, list[str]]" = weakref.WeakKeyDictionary()


def foreign_functions(func) -> list[str]:
    """The names of the foreign functions (`cuda.declare_device`: CUDA C or PTX that numba links
    in) that `func`, or a device function it reaches, refers to (once per function)."""
    hit = _foreign.get(func)
    if hit is None:
        hit = _foreign[func] = sorted({
            getattr(value, "name", name) for node in walk(func, is_numba_dispatcher).functions
            for name, value in node.references.items()
            if type(value).__name__ == "ExternFunction" and type(value).__module__.startswith("numba")})
    return hit


def device_dispatchers(func) -> list:
    """The jitted functions `func` reaches, transitively (the device functions numba compiles
    when it types or compiles `func`: CUDA dispatchers and CPU-jitted helpers), numba's own
    included."""
    return walk(func, is_numba_dispatcher).dispatchers


def user_functions(func) -> KernelGraph:
    """The graph of `func` and the jitted functions (any target) it reaches that are not
    numba's own: what numba compiles with `func` from its author's code."""
    return walk(func, _users_dispatcher)
