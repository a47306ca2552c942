"""The `gpu` backend: real numba-cuda on the machine's NVIDIA GPUs (or numba's stock simulator
standing in for one, NUMBA_ENABLE_CUDASIM=1: the code path without a GPU, no real timing)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from . import Kind


def _dim3(value) -> tuple[int, int, int]:
    dims = tuple(int(v) for v in value) if isinstance(value, (tuple, list)) else (int(value),)
    return (dims + (1, 1, 1))[:3]


@dataclass
class GpuLaunch:
    """One launch as the runner saw it: which kernel, its configuration, the device arrays passed."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    arrays: list[str] = field(default_factory=list)  # "float32[1024]" per device-array argument

    def summary(self) -> dict:
        return {"kernel": self.kernel, "grid": list(self.grid), "block": list(self.block),
                "shared_bytes": self.shared_bytes, "device": 0, "executor": "gpu", "fallback_reason": None,
                "counters": {}, "arrays_written": [], "arrays_read": [], "warnings": [],
                "compiled": {"arrays": self.arrays}}


# CUDA errors that leave the process's context unusable ("sticky"): every later CUDA call of this
# process fails too, so the judge replaces the runner. Code -> what it means for the student.
STICKY_CUDA_ERRORS = {
    700: "illegal memory access: your kernel read or wrote outside an allocation",
    702: "the kernel ran too long and was stopped (launch timeout)",
    710: "a device-side assert failed in your kernel",
    714: "hardware stack error in your kernel (deep recursion or a huge local array?)",
    715: "illegal instruction in your kernel",
    716: "misaligned address: your kernel accessed memory at an address not aligned to its type",
    717: "invalid address space: your kernel used an address in the wrong memory space",
    718: "invalid program counter in your kernel",
    719: "your kernel failed while running (launch failure)",
}
# numba-cuda launches kernels (and allocates a host array argument's copy) through cuda.core, whose
# CUDAError has no code: its message starts with the CUresult's name ("CUDA_ERROR_ILLEGAL_ADDRESS: ...")
_STICKY_NAMES = {"CUDA_ERROR_ILLEGAL_ADDRESS": 700, "CUDA_ERROR_LAUNCH_TIMEOUT": 702, "CUDA_ERROR_ASSERT": 710,
                 "CUDA_ERROR_HARDWARE_STACK_ERROR": 714, "CUDA_ERROR_ILLEGAL_INSTRUCTION": 715,
                 "CUDA_ERROR_MISALIGNED_ADDRESS": 716, "CUDA_ERROR_INVALID_ADDRESS_SPACE": 717,
                 "CUDA_ERROR_INVALID_PC": 718, "CUDA_ERROR_LAUNCH_FAILED": 719}


def sticky_cuda_error(exc: BaseException) -> str | None:
    """What a context-destroying CUDA error means, or None for any other exception."""
    code = getattr(exc, "code", None)
    if type(exc).__name__ == "CudaAPIError" and isinstance(code, int) and code in STICKY_CUDA_ERRORS:
        return STICKY_CUDA_ERRORS[code]
    if type(exc).__name__ == "CUDAError":
        code = _STICKY_NAMES.get(str(exc).split(":", 1)[0].strip())
        return STICKY_CUDA_ERRORS[code] if code is not None else None
    return None


def _on_device(value) -> bool:
    """A device array (numba's, CuPy's, ...), not a host array or a scalar."""
    return hasattr(value, "__cuda_array_interface__") or hasattr(value, "copy_to_host")


# The SMs numba's stock simulator reports when it stands in for a GPU: it runs a Python thread per
# CUDA thread, so a grid sized for 132 SMs (1,056 blocks of 256) took minutes a call; on 2 SMs a
# grid-stride stage's grid is 16 blocks (grader.judge.grid.on_the_stock_grid sizes its inputs).
STOCK_SIMULATOR_SMS = 2


def gpu_count() -> int:
    """The GPUs numba-cuda sees (numba's stock simulator: one)."""
    from numba import cuda

    try:
        return len(cuda.gpus)
    except Exception:  # noqa: BLE001 - numba's stock simulator has one
        return 1


def gpu_name() -> str:
    """The current GPU's name, for reports (numba's stock simulator says so)."""
    from numba import cuda
    from numba.cuda import config

    if config.ENABLE_CUDASIM:
        return "numba's stock simulator"
    try:
        name = cuda.get_current_device().name
    except Exception:  # noqa: BLE001 - a name is only for the report
        return "unknown GPU"
    return name.decode() if isinstance(name, bytes) else str(name)


class Gpu:
    kind = Kind.GPU

    def __init__(self, devices: int):
        self.devices = devices
        # numba.cuda and its dispatcher now, while the runner starts: not inside the student's first
        # call (the launch records patch them), whose time limit is the student's
        from numba.cuda import config

        if config.ENABLE_CUDASIM:
            from numba.cuda.simulator import kernel  # noqa: F401
        else:
            from numba.cuda import dispatcher  # noqa: F401

    @contextlib.contextmanager
    def launches(self):
        from ..sim.patching import recording_launches

        records: list[GpuLaunch] = []

        def on_launch(kernel, griddim, blockdim, sharedmem, args):
            arrays = [f"{a.dtype}{list(a.shape)}" for a in args if _on_device(a)]
            records.append(GpuLaunch(str(kernel), _dim3(griddim), _dim3(blockdim), int(sharedmem or 0), arrays))

        with recording_launches(on_launch):
            yield records

    def configure(self, compile_check: bool | None = None) -> None:
        pass  # ptxas checks are the simulator's; a GPU compiles for real

    def rank_devices(self) -> int:
        """The GPUs an all-reduce's ranks can live on (fewer than the ranks: all on GPU 0)."""
        return gpu_count()

    def time_call(self, function, input_sets: list[list], **options) -> "Timing":
        """The timing harness (below) on fresh copies of the judge's inputs for every call."""
        import numpy as np

        def fresh(inputs):
            return [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]

        return time_call(function, input_sets, fresh, **options)

    def copy_ms(self, nbytes: int) -> float:
        return copy_bandwidth_ms(nbytes)

    def device_name(self) -> str:
        return gpu_name()

    def synchronize(self) -> None:
        from numba import cuda

        cuda.synchronize()


# -- the timing harness ----------------------------------------------------------------------------
@dataclass
class Timing:
    """A function's kernels timed with CUDA events: one entry per timed call (ms of kernel time,
    the sum over its launches), after warm-up; `wall_s` is this process's own clock over the
    timed calls (the judge keeps its own, the bound that matters)."""

    times_ms: list[float]
    launches_per_call: int
    wall_s: float
    stopped: str                 # "precise", "time cap" or "repeat cap"
    outputs: list = field(default_factory=list)  # the last output of each input set, for re-checking

    def summary(self) -> dict:
        return {"times_ms": self.times_ms, "launches_per_call": self.launches_per_call, "wall_s": self.wall_s,
                "stopped": self.stopped}


def relative_error_of_median(times: list[float]) -> float:
    """The median's standard error over the median (normal approximation: 1.2533 s / sqrt(n))."""
    import statistics

    if len(times) < 2:
        return float("inf")
    median = statistics.median(times)
    return 1.2533 * statistics.stdev(times) / len(times) ** 0.5 / median if median > 0 else float("inf")


def _event_ms(elapsed_ms: float, host_s: float) -> float:
    """Events' milliseconds; numba's stock simulator has no event timing (-1), and there the host's
    wall time stands in."""
    return elapsed_ms if elapsed_ms >= 0 else 1e3 * host_s


def why_stop(times: list[float], sets: int, min_repeats: int, target: float, seconds: float, cap_s: float) -> str:
    """Whether timed calls may stop, and why: "precise" (the median's relative error under
    `target`, after `min_repeats` calls and every input set), "time cap" (`cap_s` spent, but only
    once every input set has been timed: each one's output is re-checked), or "" (go on)."""
    if len(times) >= max(min_repeats, sets) and relative_error_of_median(times) < target:
        return "precise"
    if len(times) >= sets and seconds > cap_s:
        return "time cap"
    return ""


HOLD_SLEEPS = 500  # nanosleeps of 1 us: how long the GPU is held before a timed launch (about 0.5 ms)
_hold_kernel = None  # built on first use; False where none can be had (numba's stock simulator)


def hold_body():
    """The hold kernel's Python function: `times` nanosleeps of `ns` (a uint32) nanoseconds."""
    from numba import cuda

    def hold(ns, times):
        for _ in range(times):
            cuda.nanosleep(ns)

    return hold


def hold_gpu(stream=0) -> bool:
    """Keep the GPU busy on `stream` for about half a millisecond, so that what the host enqueues
    next (a start event, a kernel, an end event) is all enqueued before the GPU reaches it: the
    events then time the kernel, not numba's dispatch of it on the host (tens of microseconds a
    launch: most of a vector add of 2^24 elements on an H200). Whether it held; a kernel that cannot
    be built or launched here (not a CUDA context's loss) is given up for the process."""
    global _hold_kernel
    if _hold_kernel is False:
        return False
    import warnings

    import numpy as np
    from numba import config, cuda

    try:
        if _hold_kernel is None:
            if config.ENABLE_CUDASIM:
                raise NotImplementedError("numba's stock simulator has no nanosleep")
            _hold_kernel = cuda.jit(hold_body())
        with warnings.catch_warnings():  # (one thread is the point: no low-occupancy warning for it)
            warnings.simplefilter("ignore")
            _hold_kernel[1, 1, stream](np.uint32(1000), HOLD_SLEEPS)
        return True
    except Exception as exc:  # noqa: BLE001 - no hold: the events time dispatch too, as before
        if sticky_cuda_error(exc):
            raise
        _hold_kernel = False
        return False


def l2_flush_bytes() -> int:
    """Twice the GPU's L2 cache (64 MiB where the driver does not say)."""
    from numba import cuda

    try:
        return 2 * int(cuda.get_current_device().L2_CACHE_SIZE)
    except Exception:  # noqa: BLE001 - the stock simulator, an old driver
        return 64 << 20


def time_call(function, input_sets: list[list], copy_args, *, warmup: int = 1, target: float = 0.02,
              min_repeats: int = 5, max_repeats: int = 100, cap_s: float = 2.0, flush_bytes: int = -1) -> Timing:
    """Call `function(*copy_args(inputs))` over the input sets in turn: `warmup` calls untimed (JIT,
    first launch), then timed calls until the median's relative error is below `target` (at least
    `min_repeats`), `max_repeats` calls or `cap_s` seconds. Each kernel launch is bracketed by CUDA
    events; a call's time is the sum of its kernels'. Before each timed call the L2 cache is flushed
    (a device-to-device copy of `flush_bytes`; -1: twice the L2), so no call finds its inputs there."""
    import time

    import numpy as np
    from numba import cuda

    from ..sim.patching import recording_launches

    max_repeats = max(max_repeats, len(input_sets))
    events: list[tuple] = []

    def before(*_):  # (no hold_gpu here: its launch would come back through this hook)
        start = cuda.event()
        start.record()
        events.append((start, None))

    def after():
        start, _ = events[-1]
        end = cuda.event()
        end.record()
        events[-1] = (start, end)

    outputs: dict[int, object] = {}
    for i in range(warmup):
        function(*copy_args(input_sets[i % len(input_sets)]))
    cuda.synchronize()
    flush = None
    if flush_bytes < 0:
        flush_bytes = l2_flush_bytes()
    if flush_bytes:
        flush = (cuda.device_array(flush_bytes, np.uint8), cuda.device_array(flush_bytes, np.uint8))
    times: list[float] = []
    launches = 0
    stopped = ""
    began = time.perf_counter()
    with recording_launches(before, after):
        for i in range(max_repeats):
            which = i % len(input_sets)
            args = copy_args(input_sets[which])
            if flush is not None:
                flush[1].copy_to_device(flush[0])
            cuda.synchronize()
            events.clear()
            host = time.perf_counter()
            outputs[which] = function(*args)
            cuda.synchronize()
            host = time.perf_counter() - host
            launches = len(events)
            kernel_ms = [start.elapsed_time(end) for start, end in events if end is not None]
            times.append(_event_ms(sum(kernel_ms) if all(t >= 0 for t in kernel_ms) else -1.0, host))
            stopped = why_stop(times, len(input_sets), min_repeats, target, time.perf_counter() - began, cap_s)
            if stopped:
                break
        stopped = stopped or "repeat cap"
    return Timing(times, launches, time.perf_counter() - began, stopped,
                  [outputs.get(i) for i in range(len(input_sets))])


def copy_bandwidth_ms(nbytes: int, repeats: int = 10) -> float:
    """The median time of one device-to-device copy of `nbytes` (the ceiling for streaming
    kernels: what the copy engine and DRAM allow), CUDA events around it."""
    import statistics

    import numpy as np
    from numba import cuda

    src, dst = cuda.device_array(nbytes, np.uint8), cuda.device_array(nbytes, np.uint8)
    dst.copy_to_device(src)  # warm-up
    import time

    times = []
    for _ in range(repeats):
        start, end = cuda.event(), cuda.event()
        hold_gpu()
        host = time.perf_counter()
        start.record()
        dst.copy_to_device(src)
        end.record()
        end.synchronize()
        times.append(_event_ms(start.elapsed_time(end), time.perf_counter() - host))
    return statistics.median(times)
