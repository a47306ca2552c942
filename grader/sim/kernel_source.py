"""A kernel's Python function, rebound to a simulated `cuda` without touching its module.

`rebind(func, fake_cuda)` returns a new function object with the same code, defaults and
closure, whose globals are a *copy* of the original's in which:
- the `numba.cuda` module is the fake `cuda`, the `numba` module a proxy whose `.cuda` is the fake;
- objects imported from `numba.cuda` by name (`from numba.cuda import grid`) are the fake's;
- jitted functions (CUDA device functions and kernels, and `@numba.jit` helpers, which
  numba-cuda compiles as device functions when a kernel calls them) are their `py_func`,
  rebound the same way.
The module itself is never modified, so another host thread or an un-simulated caller sees the
original names.
"""

from __future__ import annotations

import ast
import inspect
import math
import types

import numpy as np

from . import ast_tools, device_math, frozen, patching
from .kernel_graph import is_numba_dispatcher
from .bounded import BoundedCache


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


class _FellOff:
    """What a kernel rebound with `mark_end=True` returns when it runs off its last line
    (an explicit `return` still returns None): tells an early exit from skipping the rest."""

    def __repr__(self):
        return "FELL_OFF"


FELL_OFF = _FellOff()
_END_MARKER = "__gpugrade_fell_off__"
_marked_cache = BoundedCache(512)


def marked_code(func):
    """`func.__code__` recompiled from its source with `return FELL_OFF` appended to the body,
    or None when that is not possible (no source, a closure, a lambda)."""
    code = func.__code__
    if code in _marked_cache:
        return _marked_cache[code]
    result = None
    if not code.co_freevars:
        try:
            tree, _ = ast_tools.parse_function(func)
            fdef = tree.body[0]
            if isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    fdef.name == func.__name__:
                fdef.decorator_list = []
                ast_tools.append_return(fdef, _END_MARKER)
                ast.fix_missing_locations(tree)
                result = ast_tools.define(tree, code.co_filename, func.__name__).__code__
        except (OSError, TypeError, SyntaxError, IndexError, KeyError):
            result = None
    _marked_cache[code] = result
    return result


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


class ModuleView(types.ModuleType):
    """A module a kernel reaches jitted functions through (`import numba.cuda.random as rnd`,
    `rnd.xoroshiro128p_uniform_float32(...)`, `helpers.f(...)`): each attribute as the kernel's
    globals copy would hold it (`_replacement`), taken on first use; the module is untouched."""

    def __init__(self, module, fake_cuda, cache, real_attrs, names, constants=None):
        super().__init__(module.__name__)
        self.__gg_real = (module, fake_cuda, cache, real_attrs, names)
        for attr, value in (constants or {}).items():  # what a compile froze (frozen.py)
            setattr(self, attr, value)

    def __getattr__(self, name):
        module, fake_cuda, cache, real_attrs, names = self.__gg_real
        value = _replacement(getattr(module, name), fake_cuda, cache, real_attrs, names)
        setattr(self, name, value)
        return value


def _reaches_jitted(module, names) -> bool:
    return any(is_numba_dispatcher(getattr(module, n, None)) for n in names
               if not n.startswith("__"))


def _replacement(value, fake_cuda, cache, real_attrs, names=()):
    """The simulated stand-in for one global or closure value, or `value` itself (`names`: the
    names the function's code uses, the attributes a module it names may give it)."""
    if isinstance(value, types.ModuleType):
        if value is patching.cuda_module():
            if getattr(fake_cuda, "submodule", False) is None:
                fake_cuda.submodule = lambda module: ModuleView(
                    module, fake_cuda, cache, real_attrs, names) \
                    if _reaches_jitted(module, names) else None
            return fake_cuda
        if value.__name__ in ("numba.cuda.fp16", "numba.cuda.cg") and \
                hasattr(fake_cuda, value.__name__[11:]):
            return getattr(fake_cuda, value.__name__[11:])
        if value is patching.numba_module():
            return NumbaProxy(fake_cuda)
        if value is math:
            return _MATH_SHIM
        if _reaches_jitted(value, names):
            return ModuleView(value, fake_cuda, cache, real_attrs, names)
        return value
    if is_numba_dispatcher(value):  # a CPU-jitted helper too: numba-cuda compiles it for the device
        return rebind(value.py_func, fake_cuda, cache, device=True)
    name = real_attrs.get(id(value))
    if name is not None:
        for attr in name.split("."):
            fake_cuda = getattr(fake_cuda, attr)
        return fake_cuda
    if getattr(value, "__module__", None) == "math" and callable(value):
        return getattr(_MATH_SHIM, value.__name__, value)
    return value


def rebind(func, fake_cuda, cache: dict | None = None, mark_end: bool = False, typer=None,
           device: bool = False):
    """`func` with a globals copy in which numba's CUDA names are simulated (see module doc).

    `cache` maps original functions to their rebound twins for one launch; it makes shared and
    recursive device functions resolve to one object each. With `mark_end`, the function returns
    `FELL_OFF` when it runs off its end (see `marked_code`; unchanged when no source).
    `typer` (a `thread.typer.Typer`, kept in `cache` for the device functions): the code follows
    numba's types, and each device function (`device=True`) becomes the typer's wrapper that
    does the same for every signature it is called with; the globals and closure values numba
    freezes at a compile are those of the first launch (call) with these argument types
    (`frozen`), arrays as the fake's constant memory (`fake_cuda.const.frozen`).
    """
    cache = {} if cache is None else cache
    hit = cache.get(func)
    if hit is not None:
        return hit
    if typer is not None:
        cache["__typer__"] = typer
    typer = cache.get("__typer__")
    real_attrs = cache.setdefault("__real_attrs__", patching.cuda_attribute_names(fake_cuda))
    new_globals = dict(func.__globals__)
    closure = func.__closure__
    names = func.__code__.co_names
    wrapper = device and typer is not None
    cells_frozen, attributes_frozen = {}, {}
    if typer is not None and not wrapper and typer.argtypes is not None:
        consts = frozen.constants(func, typer.argtypes)
        new_globals.update({n: _constant(v, n, fake_cuda) for n, v in consts.globals.items()})
        cells_frozen, attributes_frozen = consts.cells, consts.attributes
    if wrapper:
        code = func.__code__
        fn = typer.device(func, new_globals)
        fn.constant = lambda value, name: _constant(value, name, fake_cuda)
        fn.module_constants = lambda glb, attributes: with_module_constants(
            glb, attributes, fake_cuda, cache, real_attrs, names)
    else:
        code = typer.kernel_code(func, mark_end) if typer is not None else None
        code = code or (marked_code(func) if mark_end else None) or func.__code__
    if typer is not None:
        new_globals.update(typer.globals)
    new_globals[_END_MARKER] = FELL_OFF
    if "round" in func.__code__.co_names and "round" not in new_globals:
        new_globals["round"] = device_math.kernel_round  # numba's round(x, ndigits)
    if not wrapper:
        fn = types.FunctionType(code, new_globals, func.__name__, func.__defaults__, closure)
    cache[func] = fn  # before recursing: a recursive device function finds itself
    for name in names:
        if name in new_globals:
            new_globals[name] = _replacement(new_globals[name], fake_cuda, cache, real_attrs,
                                             names)
    for name, value in with_module_constants(new_globals, attributes_frozen, fake_cuda, cache,
                                             real_attrs, names).items():
        new_globals[name] = value
    if closure:
        cells = tuple(types.CellType(_constant(cells_frozen[n], n, fake_cuda)) if n in cells_frozen
                      else types.CellType(_replacement(c.cell_contents, fake_cuda, cache,
                                                       real_attrs, names))
                      if has_contents(c) else c
                      for n, c in zip(func.__code__.co_freevars, closure))
        if wrapper:
            fn.closure = cells
            return fn
        fn = types.FunctionType(code, new_globals, func.__name__, func.__defaults__, cells)
        cache[func] = fn
    if wrapper:
        return fn
    fn.__kwdefaults__ = func.__kwdefaults__
    fn.__qualname__ = func.__qualname__
    return fn


def with_module_constants(glb, attributes, fake_cuda, cache, real_attrs, names) -> dict:
    """{global name: the ModuleView showing the frozen arrays of that module}, for
    `attributes` ({(global name, attribute): array}, frozen.Constants.attributes)."""
    per_module: dict = {}
    for (gname, attr), value in attributes.items():
        per_module.setdefault(gname, {})[attr] = _constant(value, f"{gname}.{attr}", fake_cuda)
    out = {}
    for gname, attrs in per_module.items():
        module = glb.get(gname)
        if isinstance(module, ModuleView):
            module = module._ModuleView__gg_real[0]
        if type(module) is types.ModuleType:
            out[gname] = ModuleView(module, fake_cuda, cache, real_attrs, names, attrs)
    return out


def _constant(value, name, fake_cuda):
    """A frozen global or closure value as the kernel sees it: an array as constant memory
    where the fake provides it (`fake_cuda.const.frozen(array, name)`)."""
    make = getattr(getattr(fake_cuda, "const", None), "frozen", None)
    if make is not None and isinstance(value, np.ndarray):
        return make(value, name)
    return value


def has_contents(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True
