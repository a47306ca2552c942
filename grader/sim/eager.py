"""Eager signatures: `cuda.jit("void(int32[:], int32)")(kernel)` while the simulator is installed.

numba compiles such a kernel at decoration, so
- a kernel numba cannot type fails in the decorator, with numba's `TypingError`, before any
  launch (the simulator runs numba-cuda's type inference for the declared types on the CPU);
- a launch converts each argument to the declared type: a Python int given for an `int32`
  parameter becomes a 32-bit value (wrapping like a C cast: 0xFFFFFFFF is -1), a float given
  for a `float32` one is rounded to float32. The simulator converts scalar arguments the same
  way before typing the launch (arrays are passed as they are, as numba passes them).

`Signatures` (one per installation) holds the declared argument types of each dispatcher; the
`compile` that `patching` puts in place of numba's calls `declare`. How values fit a declared
signature and are converted to it is `argtypes`' (the one typing of launch arguments).

Compiled code (`kernel.inspect_llvm()`, `inspect_asm()`, `inspect_lto_ptx()`) needs no GPU:
`inspect` builds numba-cuda's own kernel object for a signature the first time one is asked for
(NVVM runs on the CPU, nothing is loaded on a device), for the simulated device's compute
capability, and keeps it. Device functions compiled on the way are removed from their
dispatchers after (`patching.compile_check_device`), as after a compile check.

`dispatcher.overloads` holds an `Overload` per declared signature (and, for a kernel compiled
lazily, per argument types it was launched with), standing where numba keeps its compiled
`_Kernel`: `max_cooperative_grid_blocks` from the modelled occupancy (cooperative.py), the
signature and argument types at once, registers and shared and local memory from the compile
check (what numba's `get_regs_per_thread()` and friends read), and anything else of `_Kernel` that needs no GPU
(`_type_annotation`, `inspect_llvm`, ...) from the kernel object `inspect` builds, compiled
on the CPU the first time it is asked for. They are removed when the simulator is uninstalled.
"""

from __future__ import annotations

import weakref

import numpy as np

from . import cooperative, frozen, patching
from .argtypes import argtypes_for, declared_argtypes, fits_declared, to_declared
from .kernel_graph import device_dispatchers

__all__ = ["Signatures", "Overload"]


class Signatures:
    """The argument types declared for each eagerly compiled dispatcher."""

    def __init__(self, current_device=None):
        self._declared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._device = current_device  # the simulated device kernels are compiled for
        self._entries: list = []  # (dispatcher weakref, argument types) added to .overloads
        self._launched: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # kinds typed

    def declare(self, dispatcher, sig) -> None:
        """Record `sig` (what numba's `CUDADispatcher.compile` takes: argument types, or a
        signature string / object) for `dispatcher` and type the kernel for it: numba's
        TypingError propagates from here, as from a real decorator."""
        argtypes = declared_argtypes(sig)
        known = self._declared.setdefault(dispatcher, [])
        if argtypes not in known:
            known.append(argtypes)
        _type_at_decoration(dispatcher.py_func, argtypes)
        frozen.declare(dispatcher.py_func)  # its globals are constants of this compile
        self.add_overload(dispatcher, argtypes)

    def add_overload(self, dispatcher, argtypes: tuple) -> None:
        """An `Overload` in `dispatcher.overloads` for these argument types (none for a
        device function: numba compiles those itself)."""
        overloads = getattr(dispatcher, "overloads", None)
        if not isinstance(overloads, dict) or argtypes in overloads or \
                (getattr(dispatcher, "targetoptions", None) or {}).get("device"):
            return
        patching.put_overload(dispatcher, argtypes, Overload(self, dispatcher, argtypes))
        self._entries.append((weakref.ref(dispatcher), argtypes))

    def launched(self, dispatcher, args) -> None:
        """After a launch of a kernel compiled lazily: its overload for these arguments (typed
        once per kind of arguments: numba's typing of them costs ~5% of a small launch)."""
        overloads = getattr(dispatcher, "overloads", None)
        if not isinstance(overloads, dict) or self._declared.get(dispatcher):
            return
        kinds = tuple((type(v), getattr(v, "dtype", None), getattr(v, "strides", None))
                      for v in args)
        seen = self._launched.setdefault(dispatcher, set())
        if kinds not in seen:
            seen.add(kinds)
            self.add_overload(dispatcher, argtypes_for(args))

    def remove_overloads(self) -> None:
        """Take every `Overload` out of its dispatcher (the simulator is uninstalled)."""
        for ref, argtypes in self._entries:
            dispatcher = ref()
            overloads = getattr(dispatcher, "overloads", None)
            if isinstance(overloads, dict) and isinstance(overloads.get(argtypes), Overload):
                patching.take_overload(dispatcher, argtypes)
        self._entries.clear()
        self._launched = weakref.WeakKeyDictionary()

    def declared(self, dispatcher) -> list[tuple]:
        return list(self._declared.get(dispatcher, ()))

    def inspect(self, dispatcher, kind: str, signature=None):
        """What numba's `dispatcher.inspect_<kind>(signature)` returns for a kernel: the code
        for `signature`, or {argument types: code} over the declared signatures."""
        if signature is None:
            return {argtypes: self.inspect(dispatcher, kind, argtypes)
                    for argtypes in self.declared(dispatcher)}
        argtypes = declared_argtypes(signature)
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

            cc = tuple(self._device().compute_capability)
            with patching.compile_check_device(cc, device_dispatchers(dispatcher.py_func)):
                kernel = _Kernel(dispatcher.py_func, argtypes, **dispatcher.targetoptions)
            hit = compiled[argtypes] = (kernel, cc)
        return hit

    def convert(self, dispatcher, args) -> tuple:
        """`args` with each scalar converted to the type declared for its parameter (the first
        declared signature the arguments fit); unchanged without a declared signature."""
        for argtypes in self._declared.get(dispatcher, ()):
            if fits_declared(argtypes, args):
                return tuple(_pointed(to_declared(v, t), t) for v, t in zip(args, argtypes))
        return tuple(args)


def _pointed(value, nbtype):
    """A raw pointer argument (`types.CPointer(T)`, an integer address) as the array it points
    into (host.pointer_view); any other value unchanged."""
    from numba.core import types

    if isinstance(nbtype, types.CPointer) and isinstance(value, (int, np.integer)):
        from numba.np import numpy_support

        from .host import pointer_view

        return pointer_view(int(value), numpy_support.as_dtype(nbtype.dtype))
    return value


class Overload:
    """What `dispatcher.overloads[argtypes]` holds on the simulator (the module docstring)."""

    objectmode = False  # what numba's dispatcher base reads of an overload
    entry_point = None

    def __init__(self, signatures: Signatures, dispatcher, argtypes: tuple):
        from numba.core.typing import signature
        from numba.core import types

        self._signatures, self._dispatcher = signatures, weakref.ref(dispatcher)
        self.argument_types = argtypes
        self.signature = signature(types.void, *argtypes)
        self.cooperative = cooperative.uses_grid_sync(dispatcher.py_func)

    def max_cooperative_grid_blocks(self, blockdim, dynsmemsize=0) -> int:
        """Blocks of `blockdim` threads that can be resident at once on the current simulated
        device (numba's answer from the driver's occupancy; here the modelled one)."""
        return cooperative.max_cooperative_grid_blocks(
            self._dispatcher(), self.argument_types, blockdim, dynsmemsize,
            self._signatures._device())

    # the resources numba reads from the driver (`kernel.get_regs_per_thread()`, ...): what
    # ptxas reports for the kernel (the compile check), None without a toolchain
    regs_per_thread = property(lambda self: self._resource("registers"))
    shared_mem_per_block = property(lambda self: self._resource("shared_bytes"))
    local_mem_per_thread = property(lambda self: self._resource("local_bytes"))

    def _resource(self, field: str):
        from .compile_check import compile_check

        report = compile_check(self._dispatcher(), list(self.argument_types))
        return getattr(report, field) if report.ok else None

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        kernel, _ = self._signatures._kernel(self._dispatcher(), self.argument_types)
        return getattr(kernel, name)

    def __repr__(self):
        return f"<simulated overload of {self._dispatcher().py_func.__name__}{self.signature}>"


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
