"""The only module that changes numba: every patch goes through one recorded `PatchScope`.

Works with numba-cuda (`numba.cuda` redirected to `numba_cuda`) and with numba's own built-in
CUDA target: it patches whichever dispatcher classes exist. `PatchScope.restore()` puts back
exactly what was there (or removes what was absent), in reverse order.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import threading
import types

from .kernel_graph import device_dispatchers, dispatcher_classes, is_cuda_dispatcher

_MISSING = object()

# numba.cuda host-API names replaced while installed (each a method of host.HostAPI)
HOST_NAMES = (
    "to_device", "device_array", "device_array_like", "pinned_array", "pinned_array_like",
    "mapped_array", "mapped_array_like", "managed_array", "synchronize", "is_available",
    "is_cuda_array", "stream", "default_stream", "legacy_default_stream",
    "per_thread_default_stream", "event", "event_elapsed_time", "select_device",
    "get_current_device", "list_devices", "close", "detect", "pinned", "mapped",
    "current_context",
)
# the same function under the names numba's own modules call it by: {module: {name: HostAPI name}}
HOST_ALIASES = {
    "numba.cuda.api": {"current_context": "current_context"},
    "numba.cuda.cudadrv.devices": {"get_context": "current_context"},
    "numba.cuda.cudadrv.driver": {"device_to_device": "device_to_device"},
}


class PatchScope:
    """Records each attribute it sets so that `restore` undoes all of them."""

    def __init__(self):
        self._log: list[tuple[object, str | None, object]] = []

    def on_restore(self, undo) -> None:
        """Record a change made another way: `restore` calls `undo()` at its place in the log."""
        self._log.append((undo, None, None))

    def setattr(self, obj, name: str, value) -> None:
        original = obj.__dict__.get(name, _MISSING) if isinstance(obj, type) else \
            getattr(obj, name, _MISSING)
        self._log.append((obj, name, original))
        setattr(obj, name, value)

    def restore(self) -> None:
        while self._log:
            obj, name, original = self._log.pop()
            if name is None:
                obj()
            elif original is _MISSING:
                try:
                    delattr(obj, name)
                except AttributeError:
                    pass
            else:
                setattr(obj, name, original)

    def __len__(self):
        return len(self._log)


# ---------------------------------------------------------------- what numba offers
# (numba's CUDA dispatcher classes, and the device functions a kernel reaches: `kernel_graph`)
def numba_module():
    return importlib.import_module("numba")


def cuda_module():
    """`numba.cuda` (numba-cuda's or numba's built-in), or None when it cannot be imported."""
    try:
        return importlib.import_module("numba.cuda")
    except Exception:  # an ImportError, or a CUDA bindings error raised at import
        return None


def cuda_attribute_names(fake_cuda) -> dict[int, str]:
    """{id(real numba.cuda attribute): name} for each name the fake provides, so that objects
    a kernel imported by name (`from numba.cuda import syncthreads`) can be swapped; names of a
    namespace the fake provides (`fp16`) are dotted (`from numba.cuda.fp16 import hadd`:
    "fp16.hadd")."""
    real = cuda_module()
    if real is None:
        return {}
    out = {}
    for name in getattr(fake_cuda, "API_NAMES", ()):
        obj = getattr(real, name, None)
        if obj is not None and not isinstance(obj, (int, float, str, bool)):
            out.setdefault(id(obj), name)
        space = getattr(fake_cuda, name, None)
        if isinstance(obj, types.ModuleType) and isinstance(space, types.SimpleNamespace):
            for attr in vars(space):
                member = getattr(obj, attr, None)
                if member is not None:
                    out.setdefault(id(member), f"{name}.{attr}")
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
        for modname, names in HOST_ALIASES.items():
            try:
                module = importlib.import_module(modname)
            except Exception:  # numba's built-in CUDA target lays its modules out otherwise
                continue
            for name, host_name in names.items():
                if hasattr(module, name):
                    scope.setattr(module, name, getattr(sim.host, host_name))
        scope.setattr(cuda, "gpus", sim.gpus)
        remove = getattr(getattr(sim, "signatures", None), "remove_overloads", None)
        if remove is not None:  # the overloads put in dispatchers' `.overloads` (eager.py)
            scope.on_restore(remove)
        # eager compilation (`@cuda.jit("void(float32[:])")`, typed device functions) asks the
        # current device for its compute capability: answer with the simulated device's
        token = _DEVICE_HOOK.attach_provider(sim.host.get_current_device)
        scope.on_restore(lambda: _DEVICE_HOOK.detach_provider(token))
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
        # simulated launch never uses the binary (compile_check builds PTX on its own). The
        # declared types are recorded (launches convert arguments to them) and the kernel is
        # typed for them: numba's TypingError comes from the decorator, as on a GPU
        sim.signatures.declare(self, sig)
        return None

    def inspector(kind):
        original = getattr(cls, f"inspect_{kind}", None)

        def inspect(self, signature=None):
            # a kernel's code, compiled on the CPU for the simulated device (eager.Signatures);
            # device functions are compiled by numba itself: their own answer
            if self.targetoptions.get("device") and original is not None:
                return original(self, signature)
            return sim.signatures.inspect(self, kind, signature)

        inspect.__name__ = f"inspect_{kind}"
        return inspect

    scope.setattr(cls, "configure", configure)
    scope.setattr(cls, "compile", compile)
    for kind in ("llvm", "asm", "lto_ptx"):
        scope.setattr(cls, f"inspect_{kind}", inspector(kind))
    # ...after which the decorator freezes the dispatcher to its (now absent) overloads
    scope.setattr(cls, "disable_compile", lambda self, val=True: None)
    scope.setattr(cls, "__getitem__", getitem)
    scope.setattr(cls, "forall", forall)


# ---------------------------------------------------------------- the device numba compiles for
class StandInDevice:
    """What numba's `get_current_device()` answers inside `typing_device` / `compile_check_device`:
    a device that only has a compute capability (there is no GPU; that is why we simulate)."""

    def __init__(self, cc):
        self.compute_capability = tuple(cc)
        self.id = 0
        self.name = f"gpugrade stand-in device (sm_{cc[0]}{cc[1]})"


class _DeviceHook:
    """The one replacement of `get_current_device` in numba's dispatcher module(s).

    numba-cuda compiles a device function (at a launch, while typing a call to it, or eagerly
    for a declared signature) for `get_current_device().compute_capability`, which needs a
    driver. The hook answers, in order: the stand-in device of the calling thread's innermost
    device scope; else the installed simulator's current device; else numba's own answer.
    It is in place (one recorded `PatchScope`) while anything uses it and removed, leaving the
    modules exactly as before, when the last user leaves.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._scope: PatchScope | None = None
        self._wrappers: dict = {}  # module -> the hook installed there
        self._providers: list = []  # [(token, function)]: installed simulators, newest last
        self._threads: dict[int, list[tuple[int, int]]] = {}  # thread id -> stack of cc
        self._users = 0

    def _acquire(self) -> None:  # with self._lock held
        self._users += 1
        if self._users > 1:
            return
        scope = PatchScope()
        try:
            for cls in dispatcher_classes():
                module = importlib.import_module(cls.__module__)
                original = getattr(module, "get_current_device", None)
                if original is None or module in self._wrappers:
                    continue
                wrapper = self._wrapper(original)
                scope.setattr(module, "get_current_device", wrapper)
                self._wrappers[module] = wrapper
        except BaseException:
            scope.restore()
            self._wrappers.clear()
            self._users -= 1
            raise
        self._scope = scope

    def _release(self) -> None:  # with self._lock held
        self._users -= 1
        if self._users > 0 or self._scope is None:
            return
        # someone else replaced it since (a test's monkeypatch): leave theirs, drop ours
        if all(getattr(m, "get_current_device", None) is w for m, w in self._wrappers.items()):
            self._scope.restore()
        self._scope = None
        self._wrappers.clear()

    def _wrapper(self, original):
        hook = self

        def get_current_device():
            stack = hook._threads.get(threading.get_ident())
            if stack:
                return StandInDevice(stack[-1])
            providers = hook._providers
            if providers:
                return providers[-1][1]()
            return original()

        get_current_device.__gpugrade_device_hook__ = True
        return get_current_device

    def attach_provider(self, provider) -> object:
        token = object()
        with self._lock:
            self._acquire()
            self._providers.append((token, provider))
        return token

    def detach_provider(self, token) -> None:
        with self._lock:
            kept = [p for p in self._providers if p[0] is not token]
            if len(kept) != len(self._providers):
                self._providers = kept
                self._release()

    @contextlib.contextmanager
    def stand_in(self, cc):
        me = threading.get_ident()
        with self._lock:
            self._acquire()
            self._threads.setdefault(me, []).append(tuple(int(c) for c in cc))
        try:
            yield
        finally:
            with self._lock:
                stack = self._threads[me]
                stack.pop()
                if not stack:
                    del self._threads[me]
                self._release()


_DEVICE_HOOK = _DeviceHook()

# typing and compile checks add overloads to device functions and entries to numba's target
# context; one at a time, so that one never sees (or loses) another's stand-in overloads
_compile_lock = threading.RLock()


@contextlib.contextmanager
def registered_pass(cls, machinery, mutates_CFG: bool = False, analysis_only: bool = True):
    """numba's (process-wide) compiler pass registry holds `cls` inside the block only: the
    SIMT typing's stop-after-typing pass is there while a kernel is typed, never after.
    `machinery`: the compiler_machinery module of the CUDA target in use (numba-cuda's, or
    numba's own where numba-cuda is missing)."""
    _pass_registry = machinery._pass_registry

    with _compile_lock:
        added = not _pass_registry.is_registered(cls)
        if added:
            _pass_registry.register(mutates_CFG, analysis_only)(cls)
        try:
            yield
        finally:
            if added:
                _pass_registry._registry.pop(cls, None)


def _compiled_for(dispatcher):
    """The dispatcher that holds what numba-cuda compiles for a kernel calling `dispatcher`:
    itself, or, for a CPU-jitted function, the CUDA dispatcher numba-cuda makes of it on first
    use and caches on it (`CUDATypingContext.resolve_value_type`); None before that."""
    if is_cuda_dispatcher(dispatcher):
        return dispatcher
    return getattr(dispatcher, "_CUDATypingContext__dispatcher", None)


@contextlib.contextmanager
def _overloads_restored(dispatchers):
    """Overloads added to `dispatchers` inside the block are removed after, with the functions
    they inserted in numba's target context: nothing compiled for a stand-in device is reused
    by a real launch or by a check for another compute capability."""
    before = [(d, set(getattr(_compiled_for(d), "overloads", {}) or {})) for d in dispatchers]
    try:
        yield
    finally:
        for d, keys in before:
            overloads = getattr(_compiled_for(d), "overloads", None)
            if not isinstance(overloads, dict):
                continue
            for key in [k for k in overloads if k not in keys]:
                cres = overloads.pop(key)
                context = getattr(cres, "target_context", None)
                try:
                    context.remove_user_function(cres.entry_point)
                except (AttributeError, KeyError):
                    pass


@contextlib.contextmanager
def typing_device(cc, func, type_device_function=None):
    """While numba-cuda's type inference runs on the CPU for `func` (the SIMT executor's typing,
    the per-thread executor's types): device functions it compiles are compiled for a stand-in
    device of compute capability `cc`; their overloads are removed after.
    Where numba cannot compile a device function (no libNVVM: macOS), `type_device_function(py_func,
    argtypes) -> return type` types it instead (`_device_functions_typed_by`)."""
    with _compile_lock, _overloads_restored(device_dispatchers(func)), _DEVICE_HOOK.stand_in(cc), \
            _device_functions_typed_by(type_device_function):
        yield


class _TypedOnly:
    """A device function's overload while a kernel is typed where numba cannot compile it: the
    signature its typing found, never lowered; `_overloads_restored` removes it after typing."""

    objectmode = False

    def __init__(self, signature):
        self.signature = signature


_typing_thread = threading.local()


@functools.cache
def _device_functions_compile() -> bool:
    """Whether numba can compile a device function here: numba's CUDA lowering takes its data
    layout from libNVVM, which macOS and machines without the CUDA toolkit lack."""
    try:
        from numba.cuda.cudadrv import nvvm

        return bool(nvvm.is_available())
    except Exception:  # noqa: BLE001 - any failure to load it is its absence
        return False


@contextlib.contextmanager
def _device_functions_typed_by(type_function):
    """Where device functions cannot be compiled, the CUDA dispatchers' `compile_device` (what a
    kernel's typing calls for each device function it calls, numba's warp intrinsics included)
    records `_TypedOnly(signature)` from `type_function` on this thread for the block, instead of
    lowering. Nested typing (a device function's own) runs inside the outer block; other threads
    get numba's compile_device (the caller holds `_compile_lock`, so none types meanwhile)."""
    if type_function is None or getattr(_typing_thread, "type_function", None) is not None \
            or _device_functions_compile():
        yield
        return
    scope = PatchScope()
    for cls in dispatcher_classes():
        signature = importlib.import_module(cls.__module__).typing.signature

        def compile_device(self, args, return_type=None, _original=cls.compile_device, _signature=signature):
            typer = getattr(_typing_thread, "type_function", None)
            if typer is None or args in self.overloads:
                return _original(self, args, return_type)
            if return_type is None:
                return_type = typer(self.py_func, tuple(args))
            cres = self.overloads[args] = _TypedOnly(_signature(return_type, *args))
            return cres

        scope.setattr(cls, "compile_device", compile_device)
    _typing_thread.type_function = type_function
    try:
        yield
    finally:
        _typing_thread.type_function = None
        scope.restore()


@contextlib.contextmanager
def compile_check_device(cc, dispatchers):
    """While `compile_check` compiles a kernel for `cc`: the device functions it calls are
    compiled for a stand-in device of that cc (this thread only); overloads added to
    `dispatchers` (the kernel's device functions) are removed after."""
    with _compile_lock, _overloads_restored(dispatchers), _DEVICE_HOOK.stand_in(cc):
        yield


@contextlib.contextmanager
def recording_launches(on_launch, after_launch=None):
    """The gpu backend's launch records: for the block, `on_launch(kernel, griddim, blockdim,
    sharedmem, args)` runs before every kernel launch of real numba-cuda (or of numba's stock
    simulator standing in for a GPU, NUMBA_ENABLE_CUDASIM=1), and `after_launch()` once the launch
    is queued (the timing harness records its CUDA events there); nothing else changes. The
    records are the runner's own, so they are feedback (a missing launch, the configuration),
    never proof."""
    from numba.cuda import config

    scope = PatchScope()
    if config.ENABLE_CUDASIM:
        from numba.cuda.simulator import kernel as stock

        original = stock.FakeCUDAKernel.__call__

        def call(self, *args):
            if self._device or stock._kernel_context:  # a device function's call, not a launch
                return original(self, *args)
            on_launch(self.fn.__name__, self.grid_dim, self.block_dim, self.dynshared_size, args)
            try:
                return original(self, *args)
            finally:
                if after_launch is not None:
                    after_launch()

        scope.setattr(stock.FakeCUDAKernel, "__call__", call)
    else:
        from numba.cuda.dispatcher import _LaunchConfiguration

        original = _LaunchConfiguration.__call__

        def call(self, *args):
            on_launch(self.dispatcher.py_func.__name__, self.griddim, self.blockdim, self.sharedmem, args)
            try:
                return original(self, *args)
            finally:
                if after_launch is not None:
                    after_launch()

        scope.setattr(_LaunchConfiguration, "__call__", call)
    try:
        yield
    finally:
        scope.restore()


@contextlib.contextmanager
def checking_launches(check):
    """The rank guard's launch hook (grader/backends/rank_guard.py): for the block,
    `check(kernel, args, stream)` runs before every kernel launch of real numba-cuda (or of numba's
    stock simulator, or of gpugrade's while installed) and refuses it by raising. `stream` is the
    object the caller configured the launch with (`kernel[grid, block, stream]`, 0 for none):
    `recording_launches` does not carry it, numba-cuda keeps only a cuda.core stream made from it
    and the stock simulator drops it, so it is remembered here per launch configuration, from
    `configure` (or `__getitem__`) to the call."""
    import weakref

    from numba.cuda import config

    scope = PatchScope()
    streams: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # configured launch -> stream
    if config.ENABLE_CUDASIM:
        from numba.cuda.simulator import kernel as stock

        cls, configure_name = stock.FakeCUDAKernel, "__getitem__"
        original_getitem, original_call = stock.FakeCUDAKernel.__getitem__, stock.FakeCUDAKernel.__call__

        def configure(self, configuration):
            launch = original_getitem(self, configuration)  # the kernel itself, configured
            streams[launch] = configuration[2] if len(configuration) > 2 else 0
            return launch

        def call(self, *args):
            if not (self._device or stock._kernel_context):  # a launch, not a device function's call
                check(self.fn.__name__, args, streams.get(self, 0))
            return original_call(self, *args)

        scope.setattr(cls, "__call__", call)
    else:
        from numba.cuda.dispatcher import CUDADispatcher, _LaunchConfiguration

        cls, configure_name = CUDADispatcher, "configure"
        original_configure, original_call = CUDADispatcher.configure, _LaunchConfiguration.__call__

        def configure(self, griddim, blockdim, stream=0, sharedmem=0):  # forall and [] come here too
            launch = original_configure(self, griddim, blockdim, stream, sharedmem)
            streams[launch] = stream
            return launch

        def call(self, *args):
            check(self.dispatcher.py_func.__name__, args, streams.get(self, 0))
            return original_call(self, *args)

        scope.setattr(_LaunchConfiguration, "__call__", call)
    scope.setattr(cls, configure_name, configure)
    # gpugrade's simulator, where installed (the runner's client of the device process): its own
    # launch configuration carries the stream
    from .launch import SimLaunchConfiguration

    original_sim_call = SimLaunchConfiguration.__call__

    def sim_call(self, *args):
        check(self.dispatcher.py_func.__name__, args, self.stream)
        return original_sim_call(self, *args)

    scope.setattr(SimLaunchConfiguration, "__call__", sim_call)
    try:
        yield
    finally:
        scope.restore()


@contextlib.contextmanager
def checking_device_copies(check):
    """The rank guard's copy hook: for the block, `check(dst, src, stream)` runs before every
    `dst.copy_to_device(src, stream)` of numba's device arrays (real numba-cuda's, or the stock
    simulator's) and refuses it by raising; nothing else changes."""
    from numba.cuda import config

    if config.ENABLE_CUDASIM:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray as cls
    else:
        from numba.cuda.cudadrv.devicearray import DeviceNDArrayBase as cls
    original = cls.copy_to_device

    def copy_to_device(self, ary, stream=0):
        check(self, ary, stream)
        return original(self, ary, stream)

    scope = PatchScope()
    scope.setattr(cls, "copy_to_device", copy_to_device)
    try:
        yield
    finally:
        scope.restore()


def put_overload(dispatcher, argtypes: tuple, overload) -> None:
    """The simulator's stand-in for a compiled kernel in numba's `dispatcher.overloads` (what
    `kernel.overloads[sig]` answers on a GPU; grader.sim.eager.Overload); taken out again by
    `take_overload` when the simulator is uninstalled."""
    dispatcher.overloads[argtypes] = overload


def take_overload(dispatcher, argtypes: tuple) -> None:
    dispatcher.overloads.pop(argtypes, None)
