"""One kernel launch: configuration and its validation, arguments, executor choice with
fallback, the `LaunchRecord`, and the `trace()` sink that collects records."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import cooperative as _cooperative, devices as _devices
from .argtypes import launch_scalar
from .errors import (Checks, CompileError, LaunchConfigError, NotSimulatedError, OutOfBoundsError,
                     UninitialisedReadError, WrongDeviceError)
from .grid_aware import reads_grid_size
from .host import DeviceBuffer, SimDeviceArray, SimStream, check_device, device_buffers
from .kernel_graph import foreign_functions
from .kernel_source import KernelSource
from .memory import Instrument, LaunchConfig
from .read_only import read_only_buffers
from .sites import called_at, launch_site, launch_stack, launched

__all__ = ["LaunchConfig", "LaunchRecord", "Launch", "SimLaunchConfiguration", "trace",
           "normalise_config"]


@dataclass
class LaunchRecord:
    """What one launch did (see docs/SIMULATOR_DESIGN.md for the counter keys)."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    device: int
    executor: str
    fallback_reason: str | None
    counters: dict
    threads: dict = field(repr=False, default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    arrays_written: list[str] = field(default_factory=list)
    arrays_read: list[str] = field(default_factory=list)  # global arrays loaded from (the data flow)
    compiled: dict = field(default_factory=dict)  # compile check: registers, shared bytes, occupancy
    # memory requests per source line: {line, space, kind, requests, sectors | wavefronts}
    lines: list = field(default_factory=list)
    # per-thread executor: why values did not follow numba's types (None: they did)
    typing_note: str | None = None
    stream: int = 0  # the stream's id in the simulator's StreamOrder

    def summary(self) -> dict:
        """The record as plain data (numpy scalars as Python numbers), without the per-thread
        table (megabytes for big grids): what crosses to the judge."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "threads"}

    def thread_table(self, key: str = "global_loads") -> np.ndarray:
        """GPU-Puzzles-style table of one per-thread counter: shape grid (z, y, x) + block
        (z, y, x)."""
        return self.threads[key].reshape(self.grid[::-1] + self.block[::-1])


def _plain(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


@dataclass
class Launch:
    """Everything an executor needs for one launch."""

    kernel: KernelSource
    config: LaunchConfig
    args: list  # DeviceBuffer for arrays, numpy scalars, tuples of those
    instrument: Instrument
    checks: Checks
    device_limits: _devices.Limits
    seed: int | None = None
    cooperative: bool = False  # the kernel syncs the grid: every block resident at once


# ---------------------------------------------------------------- validation
def _dim3(value, what: str, kernel: str) -> tuple[int, int, int]:
    if isinstance(value, (int, np.integer)):
        dims = (int(value),)
    elif isinstance(value, (tuple, list)) and 1 <= len(value) <= 3 and all(
            isinstance(v, (int, np.integer)) for v in value):
        dims = tuple(int(v) for v in value)
    elif hasattr(value, "x") and hasattr(value, "y") and hasattr(value, "z"):
        dims = (int(value.x), int(value.y), int(value.z))
    else:
        floats = isinstance(value, (float, np.floating)) or isinstance(value, (tuple, list)) and any(
            isinstance(v, (float, np.floating)) for v in value)
        hint = " (a float: divide with //, e.g. (n + 255) // 256, or use math.ceil)" if floats else ""
        raise LaunchConfigError(f"kernel {kernel!r}: {what} must be an int or a tuple of 1 to 3 "
                                f"ints, got {value!r}{hint}", kernel=kernel)
    if any(d < 1 for d in dims):
        stack = launch_stack()  # a launch in a helper of the stub's: the student's call of it too
        callers = f" (called {called_at(stack[1:])})" if len(stack) > 1 else ""
        empty = (": 0 blocks, as a block count rounded down gives for n smaller than a block (n // 256 is 0 for n "
                 "< 256): round it up, (n + threads - 1) // threads; where the range is truly empty (a chunk of 0 "
                 "elements), skip the launch") if what == "grid" and 0 in dims else ""
        raise LaunchConfigError(f"kernel {kernel!r}{callers}: every {what} dimension must be >= 1, got "
                                f"{dims}{empty}", kernel=kernel)
    return dims + (1,) * (3 - len(dims))


def normalise_config(kernel: str, griddim, blockdim, stream, sharedmem, device: int,
                     limits: _devices.Limits) -> LaunchConfig:
    grid = _dim3(griddim, "grid", kernel)
    block = _dim3(blockdim, "block", kernel)
    n = block[0] * block[1] * block[2]
    if n > limits.max_threads_per_block:
        raise LaunchConfigError(f"kernel {kernel!r}: {n} threads per block {block}; the limit is "
                                f"{limits.max_threads_per_block}", kernel=kernel)
    for axis, d, lim in zip("xyz", block, limits.max_block_dim):
        if d > lim:
            raise LaunchConfigError(f"kernel {kernel!r}: block dimension {axis} = {d} exceeds "
                                    f"{lim}", kernel=kernel)
    for axis, d, lim in zip("xyz", grid, limits.max_grid_dim):
        if d > lim:
            raise LaunchConfigError(f"kernel {kernel!r}: grid dimension {axis} = {d} exceeds "
                                    f"{lim}", kernel=kernel)
    if not isinstance(sharedmem, (int, np.integer)) or sharedmem < 0:
        raise LaunchConfigError(f"kernel {kernel!r}: dynamic shared memory must be a number of "
                                f"bytes >= 0, got {sharedmem!r}", kernel=kernel)
    if sharedmem > limits.max_shared_bytes_optin:
        raise LaunchConfigError(f"kernel {kernel!r}: {sharedmem} bytes of dynamic shared memory "
                                f"exceed the {limits.max_shared_bytes_optin}-byte limit",
                                kernel=kernel)
    if isinstance(stream, SimStream) and stream.device != device:  # CUDA fails it: the current device's streams only
        raise LaunchConfigError(f"kernel {kernel!r}: launched on device {device}, the current one, with a stream of "
                                f"device {stream.device}: CUDA fails a launch on another device's stream; make device "
                                f"{stream.device} current first (`with cuda.gpus[{stream.device}]:`, or `with r:` for "
                                f"a rank r)", kernel=kernel)
    return LaunchConfig(grid, block, int(sharedmem), stream, device)


# ---------------------------------------------------------------- arguments
def _warn_implicit_copy(sim) -> None:
    """numba-cuda's own warning for a host array given to a kernel, at the student's launch line
    (once a line, as Python shows a warning), where numba's settings would give it."""
    try:
        from numba.cuda.core import config
        from numba.cuda.core.errors import NumbaPerformanceWarning
    except ImportError:  # numba's own CUDA target, or no numba-cuda
        from numba.core import config
        from numba.core.errors import NumbaPerformanceWarning
    if not getattr(config, "CUDA_WARN_ON_IMPLICIT_COPY", 1) or getattr(config, "DISABLE_PERFORMANCE_WARNINGS", 0):
        return
    site = launch_site() or ("<kernel launch>", 0)
    warnings.warn_explicit(NumbaPerformanceWarning("Host array used in CUDA kernel will incur copy overhead to/from "
                                                   "device."), NumbaPerformanceWarning, site[0], site[1],
                           registry=sim.warned)


# Python containers and text: numba types them (a reflected list, a unicode string) but no kernel
# can take one; the device process's client refuses them the same way (grader/device/client.py)
_NOT_KERNEL_ARGUMENTS = (list, dict, set, frozenset, str, bytes, bytearray)


def _refuse_arguments(kernel: KernelSource, args) -> None:
    """A Python container or text among a launch's arguments, refused before anything compiles it
    (numba's own error for one speaks of memory allocation)."""
    for name, value in zip(_param_names(kernel, args), args):
        if isinstance(value, _NOT_KERNEL_ARGUMENTS):
            raise LaunchConfigError(f"kernel {kernel.name!r}: argument {name!r} is a {type(value).__name__}, which "
                                    f"cannot be passed to a GPU: a kernel takes arrays (NumPy arrays, or device arrays "
                                    f"from cuda.to_device / cuda.device_array), numbers, and tuples of them "
                                    f"(np.array(...) makes an array of a list)", kernel=kernel.name)


def _param_names(kernel: KernelSource, args) -> list[str]:
    return kernel.params + [f"arg{i}" for i in range(len(kernel.params), len(args))]


def bind_args(sim, kernel: KernelSource, args, device: int) -> list:
    out = []
    for name, value in zip(_param_names(kernel, args), args):
        if isinstance(value, SimDeviceArray):
            check_device(value, device, kernel.name, name)
            out.append(DeviceBuffer(value, name))
        elif isinstance(value, np.ndarray):
            # numba copies a host array to the device and back after the launch, and says so
            _warn_implicit_copy(sim)
            dev = sim.host.to_device(value)
            out.append(DeviceBuffer(dev, name, host=value if value.flags.writeable else None))
        elif hasattr(value, "__cuda_array_interface__"):
            raise NotSimulatedError(f"kernel {kernel.name!r}: argument {name!r} is a "
                                    f"{type(value).__name__}; the simulator takes numpy arrays "
                                    f"and arrays from cuda.to_device / device_array")
        else:
            out.append(launch_scalar(value))  # as numba types it
    return out


# ---------------------------------------------------------------- launching
class SimLaunchConfiguration:
    """What `kernel[grid, block, stream, shared]` returns while the simulator is installed: a
    launch of `sim.launch` (a Simulator, or the runner's client of the device process)."""

    def __init__(self, sim, dispatcher, griddim, blockdim, stream=0, sharedmem=0):
        self.sim, self.dispatcher = sim, dispatcher
        self.griddim, self.blockdim, self.stream, self.sharedmem = (griddim, blockdim, stream,
                                                                   sharedmem)

    def __call__(self, *args):
        return self.sim.launch(self.dispatcher, self.griddim, self.blockdim, args, self.stream,
                               self.sharedmem)


# Threads one launch may have: the instrument keeps ~40 bytes of records per thread (counters,
# fences), and a CPU runs far fewer threads a second than a GPU. Beyond this a GPU-sized launch
# is refused by name instead of exhausting memory.
MAX_THREADS = 1 << 25
_RECORD_BYTES_PER_THREAD = 40


def check_size(kernel: str, config: LaunchConfig) -> None:
    threads = config.n_blocks * config.threads_per_block
    if threads > MAX_THREADS:
        gib = threads * _RECORD_BYTES_PER_THREAD / 1024**3
        raise NotSimulatedError(
            f"kernel {kernel!r}: a launch of {threads:,} threads (grid {config.grid} x block "
            f"{config.block}) is not simulated: at most {MAX_THREADS:,} threads per launch (its "
            f"per-thread records alone would need {gib:.1f} GiB); launch a smaller problem",
            kernel=kernel)


def _executor_order(sim) -> list[str]:
    return {"auto": ["simt", "thread"], "simt": ["simt"], "thread": ["thread"]}[sim.executor]


def _at_launch_site(exc, kernel: str):
    """A launch refused before it ran, told where the student launched it (its file and line
    become the finding's, so the feedback shows that line)."""
    site = launch_site()
    if site is None or exc.line is not None:
        return exc
    exc.filename, exc.line = site
    where = f"{site[0]}:{site[1]}"
    text = str(exc)
    head = f"kernel {kernel!r}: "
    exc.args = ((f"kernel {kernel!r} launched at {where}: {text[len(head):]}" if text.startswith(head)
                 else f"{text} (launched at {where})"),)
    return exc


def run(sim, dispatcher, griddim, blockdim, stream, sharedmem, args) -> None:
    """One launch. An out-of-bounds access or a read of uninitialised memory inside the kernel is
    often the host's doing (a view of the wrong chunk, a size off by one): its finding says the
    kernel's line, and where the host launched it."""
    try:
        _run(sim, dispatcher, griddim, blockdim, stream, sharedmem, args)
    except (OutOfBoundsError, UninitialisedReadError) as exc:
        stack = launch_stack()
        if stack and exc.kernel is not None:
            first, newline, rest = str(exc).partition("\n")
            exc.args = (f"{first}, {launched(stack)}{newline}{rest}",)
        raise


def _run(sim, dispatcher, griddim, blockdim, stream, sharedmem, args) -> None:
    kernel = KernelSource(dispatcher)
    device = sim.devices.current  # (a stream of another device is refused: normalise_config)
    try:
        config = normalise_config(kernel.name, griddim, blockdim, stream, sharedmem, device.id,
                                  device.limits)
        check_size(kernel.name, config)
        _refuse_arguments(kernel, args)
        foreign = foreign_functions(kernel.py_func)
        if foreign:
            raise NotSimulatedError(f"kernel {kernel.name!r}: it calls {', '.join(map(repr, foreign))}, declared "
                                    f"with cuda.declare_device: code in CUDA C or PTX, which the simulator cannot "
                                    f"run (write it as a @cuda.jit(device=True) function, or grade on a GPU)",
                                    kernel=kernel.name)
    except (LaunchConfigError, NotSimulatedError) as exc:
        raise _at_launch_site(exc, kernel.name) from None
    args = sim.signatures.convert(dispatcher, args)  # to the declared types, as numba does
    compiled, instructions = _compile_check(kernel, dispatcher, args, config) if sim.compile_check else ({}, None)
    cooperative = _cooperative.check_launch(kernel, dispatcher, args, config, device)
    try:
        bound = bind_args(sim, kernel, args, device.id)
    except WrongDeviceError as exc:
        raise _at_launch_site(exc, kernel.name) from None
    unwritten, settled = _expected(sim.checks, kernel, bound)
    aliases = _aliases(bound) if sim.checks.enabled("races") else {}
    reason = typing_note = None
    for name in _executor_order(sim):
        inst = Instrument(kernel.name, kernel.filename, config, sim.checks)
        inst.expect(unwritten, settled, aliases)
        launch = Launch(kernel, config, bound, inst, sim.checks, device.limits, sim.seed,
                        cooperative)
        if name == "simt":
            simt_run, unsupported = _simt()
            if simt_run is None:
                reason = "the lockstep SIMT executor is not available"
                continue
            try:
                simt_run(launch)
            except (unsupported, ImportError) as exc:
                if _refused(exc, kernel):  # numba's typing refuses it: no executor runs it
                    raise _typing_error(kernel, exc) from None
                # ImportError: a part of numba the lockstep typing needs is missing (numba's
                # built-in CUDA target instead of numba-cuda): the per-thread executor still runs
                reason = str(exc) if isinstance(exc, unsupported) else \
                    f"the SIMT executor cannot run here ({exc})"
                if sim.executor == "simt":
                    raise NotSimulatedError(f"kernel {kernel.name!r}: the SIMT executor does "
                                            f"not handle it: {reason}") from None
                continue
            except Exception:
                inst.close_race()  # a race found earlier, its advice left open, comes first
                raise
        else:
            from .thread.executor import ThreadExecutor

            try:
                executor = ThreadExecutor(launch)  # types the kernel as numba does
            except Exception as exc:
                if _refused(exc, kernel):
                    raise _typing_error(kernel, exc) from None
                raise
            try:
                executor.run()
            except Exception:
                inst.close_race()  # as above
                raise
            typing_note = executor.typing_note
        break
    else:
        raise NotSimulatedError(f"kernel {kernel.name!r}: no executor available ({reason})")
    counters = inst.finish()
    counters["reads_grid_size"] = int(reads_grid_size(kernel.py_func))  # (a grid-stride loop)
    threads = counters.pop("threads")
    lines = counters.pop("lines")
    if instructions is not None:  # estimated from the compiled code and the lines' requests
        from .compile_check.issue import block_runs, load_round_trips, warp_instructions

        runs = block_runs(instructions, lines, inst.warp_ops_by_line, config.n_blocks * config.warps_per_block)
        # the loops' only: the work that grows with the problem (docs/PERF_MODEL.md)
        counters["loop_warp_instructions"] = warp_instructions(instructions, runs, loops_only=True)
        counters["loop_fp64_instructions"] = warp_instructions(instructions, runs, True, "fp64 math")
        counters["loop_fp64_conversions"] = warp_instructions(instructions, runs, True, "fp64 conversions")
        counters["load_round_trips"] = load_round_trips(instructions, runs)
    # (what the performance model reads of a launch: the events' clock times it)
    model = {"grid": config.grid, "block": config.block, "shared_bytes": config.shared_bytes, "counters": counters,
             "compiled": compiled}
    stream_id = _order_kernel(sim, config, device.id, kernel.name, bound, inst, model)
    for buf in bound:  # numba copies a host array back after the launch (on the stream order: after it)
        if isinstance(buf, DeviceBuffer) and buf.host is not None:
            buf.array.copy_to_host(buf.host)
    record = LaunchRecord(kernel.name, config.grid, config.block, config.shared_bytes, device.id,
                          name, reason if name != "simt" else None, counters, threads,
                          list(inst.warnings), sorted(inst.written), sorted(inst.read), compiled,
                          typing_note=typing_note, lines=lines, stream=stream_id)
    sim.signatures.launched(dispatcher, args)  # its `.overloads` entry (eager.Overload)
    sim.tracer.publish(record)


def _expected(checks, kernel: KernelSource, bound: list) -> tuple[set[int], set[int]]:
    """(the allocations of the arguments no thread of this launch can write, those initialised
    throughout): what spares their loads the checkers (`Instrument.expect`). Found only for a
    checker that is on: the source analysis and the scan of the flags cost a little per launch."""
    unwritten = read_only_buffers(kernel.py_func, kernel.params, bound) \
        if checks.enabled("races") else set()
    settled = {b.buffer_id for b in device_buffers(bound) if b.initialised.all()} \
        if checks.enabled("uninitialised") else set()
    return unwritten, settled


def _aliases(bound: list) -> dict[int, str]:
    """Allocations given as two or more array arguments (`k[g, b](a, a)`): buffer id -> the
    note a race on it adds, naming the parameters and the launch line (the same array, or
    views of one array whose elements may overlap)."""
    by_id: dict[int, list] = {}
    for buf in bound:
        if isinstance(buf, DeviceBuffer):
            by_id.setdefault(buf.buffer_id, []).append(buf)
    shared = {k: bufs for k, bufs in by_id.items() if len(bufs) > 1}
    if not shared:
        return {}
    site = launch_site()
    at = f" at line {site[1]}" if site and site[1] else ""
    notes = {}
    for k, bufs in shared.items():
        names = ", ".join(b.name for b in bufs[:-1]) + f" and {bufs[-1].name}"
        first = bufs[0]
        same = all((b.offset, b.shape, b.estrides) == (first.offset, first.shape, first.estrides) for b in bufs)
        notes[k] = (f"{names} are the same array, passed {'twice' if len(bufs) == 2 else f'{len(bufs)} times'}{at}: "
                    f"threads read what others write; give the kernel a separate output array") if same else \
            (f"{names} are views of one array, passed{at}: their elements may overlap; give the kernel a separate "
             f"output array")
    return notes


def _order_kernel(sim, config: LaunchConfig, device: int, name: str, bound: list, inst: Instrument,
                  model: dict) -> int:
    """The launch in the simulator's stream order (a race with work on another stream raises
    StreamRaceError); the stream's id."""
    order = getattr(sim, "streams", None)
    if order is None:
        return 0
    stream = order.resolve(config.stream, device)
    arrays = [b for b in bound if isinstance(b, DeviceBuffer) and b.host is None]
    order.kernel(stream, name, [(b.array, b.name) for b in arrays if b.name in inst.read],
                 [(b.array, b.name) for b in arrays if b.name in inst.written], model)
    return stream


def _compile_check(kernel: KernelSource, dispatcher, args, config: LaunchConfig) -> tuple[dict, dict | None]:
    """What a GPU's compiler would say about this kernel for these arguments (cached by source),
    and its instruction profile (compile_check.issue; None where there is none).

    Refused: raise CompileError, as numba would at a real launch. Toolchain unavailable (no
    numba-cuda on this platform): the launch goes on and the record says why nothing was checked.
    """
    from .compile_check import compile_check

    report = compile_check(dispatcher, list(args))
    if report.failed:
        raise CompileError(f"kernel {kernel.name!r} would not compile for a GPU: {report.message}")
    if not report.available:
        return {"available": False, "reason": report.message}, None
    threads = config.block[0] * config.block[1] * config.block[2]
    occupancy = report.occupancy(threads, config.shared_bytes)  # config.shared_bytes: the dynamic part
    return {"available": True, "registers": report.registers, "shared_bytes": report.shared_bytes,
            "local_bytes": report.local_bytes, "spill_stores": report.spill_stores,
            "spill_loads": report.spill_loads, "occupancy": occupancy.summary()}, report.instructions


def _refused(exc: BaseException, kernel: KernelSource) -> bool:
    """Whether `exc` is numba's type inference refusing the kernel itself (see simt.typing);
    a device function typed while running falls back like any other unsupported feature."""
    try:
        from .simt.typing import TypingRefused
    except ImportError:
        return False
    return isinstance(exc, TypingRefused) and exc.py_func is kernel.py_func


def _typing_error(kernel: KernelSource, exc) -> CompileError:
    """numba's typing refused the kernel: the error a launch with the compile check on raises
    (same message under both executors: the compile check's, naming the student's line)."""
    from .compile_check import explain_failure

    report = explain_failure(exc.error, exc.py_func)
    return CompileError(f"kernel {kernel.name!r} would not compile for a GPU: {report.message}",
                        kernel=kernel.name, filename=report.filename, line=report.lineno)


def _simt():
    """(run, Unsupported) of the SIMT executor, or (None, None) while it does not exist."""
    try:
        from . import simt
    except ImportError:
        return None, None
    run_fn = getattr(simt, "run", None)
    unsupported = getattr(simt, "Unsupported", None) or getattr(simt, "SimtUnsupported", None)
    if run_fn is None or unsupported is None:
        return None, None
    return run_fn, unsupported


# ---------------------------------------------------------------- launch records
class Tracer:
    """The launch records of one simulator, handed to every `trace()` block open on it (each
    simulator has its own: two in one process never see each other's launches)."""

    def __init__(self):
        self._sinks: list[tuple[list, Callable | None]] = []
        self._lock = threading.Lock()

    def publish(self, record: LaunchRecord) -> None:
        with self._lock:
            for sink, keep in self._sinks:
                sink.append(record if keep is None else keep(record))

    @contextlib.contextmanager
    def trace(self, keep: Callable | None = None):
        """`with tracer.trace() as launches:` collects one LaunchRecord per launch, or what `keep`
        makes of it."""
        records: list = []
        entry = (records, keep)
        with self._lock:
            self._sinks.append(entry)
        try:
            yield records
        finally:
            with self._lock:
                self._sinks.remove(entry)
