"""An instrumented CUDA simulator for numba-cuda kernels on machines without a GPU.

    import grader.sim as sim
    sim.install(devices=2)          # every numba.cuda launch in this process is simulated
    with sim.trace() as launches:
        kernel[blocks, threads](d_a, d_out)
    launches[0].counters["sectors_per_request"]
    sim.uninstall()                 # numba is exactly as before

Findings (out-of-bounds, races, uninitialised reads, barrier divergence, warp-op misuse,
deadlock) raise subclasses of `SimError`; `Checks(warn={...})` downgrades chosen checkers.
See docs/SIMULATOR_DESIGN.md.
"""

from __future__ import annotations

import contextlib
import threading

from . import patching
from .devices import Devices, GpuList
from .eager import Signatures
from .event_clock import EventClock
from .errors import (BarrierDivergenceError, Checks, DeadlockError, LaunchConfigError,
                     NotSimulatedError, OutOfBoundsError, RaceError, SimError, SimWarning,
                     StreamRaceError, UninitialisedReadError, WarpOpError, WrongDeviceError)
from .host import HostAPI, SimDeviceArray
from .launch import LaunchRecord, SimLaunchConfiguration, Tracer
from .launch import run as _run
from .streams import StreamOrder

__all__ = [
    "install", "uninstall", "tune_process", "installed", "is_installed", "current", "trace", "Checks",
    "LaunchRecord", "SimDeviceArray", "Simulator", "SimError", "OutOfBoundsError", "RaceError",
    "UninitialisedReadError", "BarrierDivergenceError", "WarpOpError", "DeadlockError",
    "LaunchConfigError", "WrongDeviceError", "NotSimulatedError", "SimWarning", "StreamRaceError",
]

EXECUTORS = ("auto", "simt", "thread")


class LaunchTarget:
    """What numba's patched dispatchers launch through: `kernel[grid, block](...)` and
    `kernel.forall(n)(...)` become `self.launch(...)`. A Simulator runs launches itself; the
    runner's client of the device process (grader.device.client) sends them there."""

    def configure(self, dispatcher, griddim, blockdim, stream=0, sharedmem=0):
        return SimLaunchConfiguration(self, dispatcher, griddim, blockdim, stream, sharedmem)

    def forall(self, dispatcher, ntasks, tpb=0, stream=0, sharedmem=0):
        tpb = tpb or 128
        return _Forall(self, dispatcher, ntasks, tpb, stream, sharedmem)

    def launch(self, dispatcher, griddim, blockdim, args, stream=0, sharedmem=0) -> None:
        raise NotImplementedError


class Simulator(LaunchTarget):
    """One installation: devices, checks, executor choice; the target of numba's patches."""

    def __init__(self, devices: int = 1, executor: str = "auto", checks: Checks | None = None,
                 seed: int | None = None, compile_check: bool = False, gpu_key: str | None = None):
        if executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {EXECUTORS}, got {executor!r}")
        self.devices = Devices(devices)
        self.gpus = GpuList(self.devices)
        self.executor = executor
        self.checks = checks or Checks()
        self.seed = seed  # None: thread order as numbered; an int: a seeded shuffle
        # Before each launch, compile the kernel for sm_90 as a GPU would (grading turns it on):
        # a kernel that runs in Python but not on a GPU fails its launch with CompileError.
        self.compile_check = compile_check
        self.host = HostAPI(self)
        # the argument types of kernels decorated with a signature (`cuda.jit("void(...)")`)
        self.signatures = Signatures(lambda: self.devices.current)
        self.tracer = Tracer()  # this simulator's launch records (`trace()`)
        self.warned: dict = {}  # the warnings shown, by line (numba's, once a launch line)
        # events' times: the performance model's timeline on `gpu_key`'s preset (default the H100)
        self.clock = EventClock(gpu_key)
        self.streams = StreamOrder(self.clock.issued)  # what the GPU's streams and events would order; stream races

    def launch(self, dispatcher, griddim, blockdim, args, stream=0, sharedmem=0) -> None:
        _run(self, dispatcher, griddim, blockdim, stream, sharedmem, args)


class _Forall:
    def __init__(self, sim, dispatcher, ntasks, tpb, stream, sharedmem):
        self.sim, self.dispatcher, self.ntasks = sim, dispatcher, ntasks
        self.tpb, self.stream, self.sharedmem = tpb, stream, sharedmem

    def __call__(self, *args):
        if self.ntasks == 0:
            return
        blocks = (self.ntasks + self.tpb - 1) // self.tpb
        self.sim.launch(self.dispatcher, blocks, self.tpb, args, self.stream, self.sharedmem)


_state_lock = threading.Lock()
_active: tuple[Simulator, patching.PatchScope] | None = None


def tune_process() -> None:
    """Process-wide settings that make simulation faster (glibc malloc thresholds; see
    simt.executor.tune_malloc): only for a process that is the simulator's own, at its start."""
    try:
        from .simt.executor import tune_malloc
    except ImportError:  # the lockstep executor is not available here
        return
    tune_malloc()


def install(devices: int = 1, executor: str = "auto", checks: Checks | None = None,
            seed: int | None = None, compile_check: bool = False, gpu_key: str | None = None) -> Simulator:
    """Simulate every numba.cuda launch and host-API call of this process until `uninstall()`
    (`gpu_key`: the performance model's preset that events' times follow). Installing again
    replaces the previous installation."""
    global _active
    sim = Simulator(devices, executor, checks, seed, compile_check, gpu_key)
    with _state_lock:
        if _active is not None:
            _active[1].restore()
            _active = None
        _active = (sim, patching.apply(sim))
    return sim


def uninstall() -> None:
    """Undo every patch of `install`; a no-op when not installed."""
    global _active
    with _state_lock:
        if _active is not None:
            _active[1].restore()
            _active = None


def trace(keep=None):
    """`with trace() as launches:` one LaunchRecord per launch of the installed simulator (`keep`:
    what of each to keep instead, `LaunchRecord.summary` say: a long run need not hold every
    launch's per-thread tables)."""
    if _active is None:
        raise RuntimeError("grader.sim is not installed: install() before trace()")
    return _active[0].tracer.trace(keep)


def is_installed() -> bool:
    return _active is not None


def current() -> Simulator | None:
    """The installed simulator (its `devices.links()` has the peer-copy counters)."""
    return _active[0] if _active is not None else None


@contextlib.contextmanager
def installed(devices: int = 1, executor: str = "auto", checks: Checks | None = None,
              seed: int | None = None, compile_check: bool = False, gpu_key: str | None = None):
    """`with installed(...) as sim:` install for the block, uninstall after."""
    sim = install(devices, executor, checks, seed, compile_check, gpu_key)
    try:
        yield sim
    finally:
        uninstall()
