"""Timing an all-reduce the nccl-tests way: the student's `f(ranks, bufs)` and NCCL's.

The method is nccl-tests' (its doc/PERFORMANCE.md and src/common.cu): on the same buffers, `warmup`
calls untimed, then `timed` calls each under a host timer (`time.perf_counter`) that stops once
every rank is synchronised; the median is the call's time. algbw = bytes per rank buffer / time,
busbw = algbw * 2 (N - 1) / N: what each rank's links carry, comparable across N and with the
hardware's link bandwidth.

The buffers are float32 zeros: repeated in-place sums of zeros never overflow and the work is the
same; afterwards every buffer must still be zeros (a function that changes them is no all-reduce).

Used by the runner's `time_ranks` op (the student's function, in the student's runner: its times
are bounded by the judge's clock) and `nccl_allreduce` op (NCCL through CuPy, in the trusted
reference runner only), and by benchmarks/allreduce_gpus.py. CuPy is imported only when NCCL is
timed, so a machine without it times everything else.
"""

from __future__ import annotations

import time
from typing import Callable

MAX_TIMED = 1000  # timed calls per request (the wire's bound on the seconds that come back)
MAX_WARMUP = 1000
MAX_COUNT = 1 << 30  # float32 elements per rank buffer (4 GiB)


class TimingUnavailable(RuntimeError):
    """This machine cannot time it (no CuPy, no NCCL, fewer GPUs than ranks, not a GPU backend)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# -- the arithmetic (nccl-tests') ------------------------------------------------------------------
def bus_factor(ranks: int) -> float:
    """busbw / algbw of an all-reduce: each rank sends and receives 2 (N - 1) / N of the buffer."""
    return 2.0 * (ranks - 1) / ranks


def algbw_gbs(nbytes: int, seconds: float) -> float:
    """nccl-tests' algorithm bandwidth, GB/s (10^9 bytes): the buffer's size over the time."""
    return nbytes / seconds / 1e9


def busbw_gbs(nbytes: int, seconds: float, ranks: int) -> float:
    return algbw_gbs(nbytes, seconds) * bus_factor(ranks)


def nccl_version_text(code: int) -> str:
    """ncclGetVersion's integer as x.y.z (from 2.9 on: x * 10000 + y * 100 + z; before: x * 1000 + y * 100 + z)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


# -- the timing method ---------------------------------------------------------------------------
def seconds_of(call: Callable[[], object]) -> float:
    """Host seconds of one `call()` (which returns once every rank is synchronised)."""
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def time_calls(call: Callable[[], object], warmup: int, timed: int) -> list[float]:
    """`warmup` calls untimed, then the seconds of each of `timed` calls."""
    for _ in range(warmup):
        call()
    return [seconds_of(call) for _ in range(timed)]


def allreduce_call(function, ranks, bufs) -> Callable[[], None]:
    """One all-reduce of `function(ranks, bufs)`, returning once every rank has finished."""
    def call() -> None:
        function(ranks, list(bufs))  # a fresh list: the student's function may change its own
        ranks.synchronize()
    return call


def time_allreduce(function, ranks, bufs, warmup: int, timed: int) -> list[float]:
    """The student's `function(ranks, bufs)` timed on `bufs` (one device buffer per rank of the
    `Ranks` object `ranks`), nccl-tests' method; the caller checks the buffers afterwards."""
    ranks.synchronize()  # the uploads are not the call's time
    return time_calls(allreduce_call(function, ranks, bufs), warmup, timed)


def first_nonzero(hosts: list) -> tuple[int, int, float] | None:
    """(rank, index, value) of the first element of the downloaded buffers that is not 0 (NaN
    included), or None when all are zeros."""
    import numpy as np

    for rank, host in enumerate(hosts):
        wrong = np.flatnonzero(~(np.asarray(host) == 0))
        if wrong.size:
            return rank, int(wrong[0]), float(np.asarray(host).reshape(-1)[wrong[0]])
    return None


# -- NCCL through CuPy ---------------------------------------------------------------------------
def load_nccl() -> tuple[object, object, dict]:
    """(cupy, cupy.cuda.nccl, facts) or (None, None, facts saying why not); imported only here,
    so that a machine without CuPy still times the rest."""
    try:
        import cupy
    except Exception as exc:  # noqa: BLE001 - ImportError, or CuPy failing to load its CUDA libraries
        return None, None, {"cupy": None, "nccl": None,
                            "why": f"no CuPy ({type(exc).__name__}: {exc}): pip install the `gpu` extra"}
    facts = {"cupy": cupy.__version__, "nccl": None}
    try:
        from cupy.cuda import nccl
    except Exception as exc:  # noqa: BLE001
        return cupy, None, {**facts, "why": f"cupy.cuda.nccl does not import ({type(exc).__name__}: {exc})"}
    if not getattr(nccl, "available", True) or not hasattr(nccl, "NcclCommunicator"):
        return cupy, None, {**facts, "why": "cupy.cuda.nccl is not available (no NCCL library: nvidia-nccl-cu13)"}
    try:
        facts["nccl"] = nccl_version_text(int(nccl.get_version()))
    except Exception as exc:  # noqa: BLE001
        return cupy, None, {**facts, "why": f"NCCL does not load ({type(exc).__name__}: {exc})"}
    return cupy, nccl, facts


def nccl_setup(cupy, nccl, hosts: list) -> tuple[Callable[[], None], list, list]:
    """NCCL's all-reduce over len(hosts) GPUs (rank r on GPU r, `NcclCommunicator.initAll`):
    (call, device buffers, communicators). Host array r is copied to GPU r; `call()` is one
    in-place float32 SUM `allReduce` per rank between `groupStart()` and `groupEnd()`, returning
    once every rank's stream is synchronised."""
    ranks = len(hosts)
    comms = nccl.NcclCommunicator.initAll(list(range(ranks)))
    bufs, streams = [], []
    for r in range(ranks):
        with cupy.cuda.Device(r):
            bufs.append(cupy.asarray(hosts[r]))
            streams.append(cupy.cuda.Stream(non_blocking=True))
    count = int(hosts[0].size)

    def call() -> None:
        nccl.groupStart()
        for comm, buf, stream in zip(comms, bufs, streams):  # in place, as the student's
            comm.allReduce(buf.data.ptr, buf.data.ptr, count, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
        nccl.groupEnd()
        for stream in streams:
            stream.synchronize()

    return call, bufs, comms


def gpu_count(cupy) -> int:
    """The GPUs CuPy sees (0 where it finds no driver)."""
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # noqa: BLE001 - no driver, no device
        return 0


def time_nccl_allreduce(ranks: int, count: int, warmup: int, timed: int) -> tuple[list[float], int]:
    """(seconds of each timed call, GPUs used) of NCCL's in-place float32 all-reduce of `count`
    zeros per rank, rank r on GPU r; `TimingUnavailable` where CuPy, NCCL or the GPUs are missing."""
    import numpy as np

    cupy, nccl, facts = load_nccl()
    if nccl is None:
        raise TimingUnavailable(f"NCCL cannot be timed here: {facts['why']}")
    gpus = gpu_count(cupy)
    if gpus < ranks:
        raise TimingUnavailable(f"NCCL's all-reduce needs one GPU per rank: {ranks} ranks, but this machine has "
                          f"{gpus} GPU{'' if gpus == 1 else 's'}")
    call, bufs, comms = nccl_setup(cupy, nccl, [np.zeros(count, np.float32) for _ in range(ranks)])
    try:
        seconds = time_calls(call, warmup, timed)
        wrong = first_nonzero([cupy.asnumpy(b) for b in bufs])
        if wrong is not None:
            rank, index, value = wrong
            raise RuntimeError(f"NCCL's all-reduce of zeros left {value!r} at rank {rank}'s element {index}")
    finally:
        for comm in comms:
            try:
                comm.destroy()
            except Exception:  # noqa: BLE001 - freeing is best effort
                pass
        del bufs[:]
        for r in range(ranks):
            with cupy.cuda.Device(r):
                cupy.get_default_memory_pool().free_all_blocks()
    return seconds, ranks


__all__ = ["MAX_COUNT", "MAX_TIMED", "MAX_WARMUP", "TimingUnavailable", "algbw_gbs", "allreduce_call", "bus_factor",
           "busbw_gbs", "first_nonzero", "gpu_count", "load_nccl", "nccl_setup", "nccl_version_text",
           "seconds_of", "time_allreduce", "time_calls", "time_nccl_allreduce"]
