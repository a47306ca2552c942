"""The only module that changes numba: every patch goes through one recorded `PatchScope`.

Works with numba-cuda (`numba.cuda` redirected to `numba_cuda`) and with numba's own built-in
CUDA target: it patches whichever dispatcher classes exist. `PatchScope.restore()` puts back
exactly what was there (or removes what was absent), in reverse order.
"""

from __future__ import annotations

import importlib
import threading

_MISSING = object()

# numba.cuda host-API names replaced while installed (each a method of host.HostAPI)
HOST_NAMES = (
    "to_device", "device_array", "device_array_like", "pinned_array", "pinned_array_like",
    "mapped_array", "mapped_array_like", "managed_array", "synchronize", "is_available",
    "is_cuda_array", "stream", "default_stream", "legacy_default_stream",
    "per_thread_default_stream", "event", "event_elapsed_time", "select_device",
    "get_current_device", "list_devices", "close", "detect", "pinned", "mapped",
)


class PatchScope:
    """Records each attribute it sets so that `restore` undoes all of them."""

    def __init__(self):
        self._log: list[tuple[object, str, object]] = []

    def setattr(self, obj, name: str, value) -> None:
        original = obj.__dict__.get(name, _MISSING) if isinstance(obj, type) else \
            getattr(obj, name, _MISSING)
        self._log.append((obj, name, original))
        setattr(obj, name, value)

    def restore(self) -> None:
        while self._log:
            obj, name, original = self._log.pop()
            if original is _MISSING:
                try:
                    delattr(obj, name)
                except AttributeError:
                    pass
            else:
                setattr(obj, name, original)

    def __len__(self):
        return len(self._log)


# ---------------------------------------------------------------- what numba offers
def numba_module():
    return importlib.import_module("numba")


def cuda_module():
    """`numba.cuda` (numba-cuda's or numba's built-in), or None when it cannot be imported."""
    try:
        return importlib.import_module("numba.cuda")
    except Exception:  # an ImportError, or a CUDA bindings error raised at import
        return None


def dispatcher_classes() -> list[type]:
    """The CUDA dispatcher classes present in this process (usually exactly one)."""
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


_DISPATCHERS: tuple[type, ...] | None = None


def is_dispatcher(obj) -> bool:
    global _DISPATCHERS
    if _DISPATCHERS is None:
        _DISPATCHERS = tuple(dispatcher_classes())
    return isinstance(obj, _DISPATCHERS) and hasattr(obj, "py_func")


def cuda_attribute_names(fake_cuda) -> dict[int, str]:
    """{id(real numba.cuda attribute): name} for each name the fake provides, so that objects
    a kernel imported by name (`from numba.cuda import syncthreads`) can be swapped."""
    real = cuda_module()
    if real is None:
        return {}
    out = {}
    for name in getattr(fake_cuda, "API_NAMES", ()):
        obj = getattr(real, name, None)
        if obj is not None and not isinstance(obj, (int, float, str, bool)):
            out.setdefault(id(obj), name)
    return out


# ---------------------------------------------------------------- the patches
_lock = threading.Lock()


def apply(sim) -> PatchScope:
    """Route launches and the host API to `sim` (a `grader.sim.Simulator`)."""
    scope = PatchScope()
    classes = dispatcher_classes()
    cuda = cuda_module()
    if not classes or cuda is None:
        raise RuntimeError("numba.cuda is not importable: nothing to simulate")
    try:
        for cls in classes:
            _patch_dispatcher(scope, cls, sim)
        for name in HOST_NAMES:
            scope.setattr(cuda, name, getattr(sim.host, name))
        scope.setattr(cuda, "gpus", sim.gpus)
        # eager compilation (`@cuda.jit("void(float32[:])")`, typed device functions) asks the
        # current device for its compute capability: answer with the simulated device's
        for cls in classes:
            module = importlib.import_module(cls.__module__)
            if hasattr(module, "get_current_device"):
                scope.setattr(module, "get_current_device", sim.host.get_current_device)
    except BaseException:
        scope.restore()
        raise
    return scope


def _patch_dispatcher(scope: PatchScope, cls: type, sim) -> None:
    def configure(self, griddim, blockdim, stream=0, sharedmem=0):
        return sim.configure(self, griddim, blockdim, stream, sharedmem)

    def getitem(self, args):
        if not isinstance(args, tuple) or len(args) not in (2, 3, 4):
            raise ValueError("must specify at least the griddim and blockdim")
        return sim.configure(self, *args)

    def forall(self, ntasks, tpb=0, stream=0, sharedmem=0):
        return sim.forall(self, ntasks, tpb, stream, sharedmem)

    def compile(self, sig):
        # eager `@cuda.jit("void(...)")` compiles at decoration, which needs a driver; a
        # simulated launch never uses the binary (compile_check builds PTX on its own)
        return None

    scope.setattr(cls, "configure", configure)
    scope.setattr(cls, "compile", compile)
    # ...after which the decorator freezes the dispatcher to its (now absent) overloads
    scope.setattr(cls, "disable_compile", lambda self, val=True: None)
    scope.setattr(cls, "__getitem__", getitem)
    scope.setattr(cls, "forall", forall)
