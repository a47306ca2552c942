"""Which machine runs the student's kernels, behind one seam.

`Kind` names the two backends: `sim` (grader.sim, the instrumented simulator, normally in a device
process of its own) and `gpu` (real numba-cuda on an NVIDIA GPU). The judge only *resolves* a name
(`resolve`); a runner *opens* one (`runtime.open_backend`) and then speaks to it through the `Backend`
protocol, never to grader.sim or numba.cuda's driver directly:

- `launches()`: the launches of a block, as this process saw them. Feedback only: a record kept in
  the student's process is never proof (the device process's own records are);
- `configure(...)`: the settings the judge may change (the compile check);
- `synchronize()`: wait for every device of the backend;
- `devices`: how many devices the student's code sees; `rank_devices()`: how many an all-reduce's
  ranks can be spread over (grader/backends/ranks.py);
- `time_call(function, input_sets, **options)` and `device_name()`: only where times are measured
  (the gpu backend: CUDA events around each kernel); the simulator models them instead
  (grader.perf_model) and has neither.
"""

from __future__ import annotations

import contextlib
from enum import Enum
from typing import ContextManager, Protocol

from ..errors import UsageError


class Kind(str, Enum):
    SIM = "sim"
    GPU = "gpu"

    def __str__(self) -> str:
        return self.value


BACKENDS = ("auto", Kind.SIM.value, Kind.GPU.value)


class Backend(Protocol):
    kind: Kind
    devices: int

    def launches(self) -> ContextManager[list]: ...

    def configure(self, compile_check: bool | None = None) -> None: ...

    def synchronize(self) -> None: ...

    def rank_devices(self) -> int: ...


def gpu_available() -> bool:
    """True when numba-cuda sees a usable GPU. Never raises: no driver simply means no GPU."""
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # noqa: BLE001 - any import or driver failure means "no GPU here"
        return False


def resolve(backend: str) -> Kind:
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return Kind.GPU if gpu_available() else Kind.SIM
    if backend == Kind.GPU and not gpu_available():
        raise UsageError("backend 'gpu' asked for, but numba-cuda sees no GPU here (try --backend sim)")
    return Kind(backend)


@contextlib.contextmanager
def no_records():
    """`launches()` of a backend whose launches are recorded elsewhere (or not yet at all)."""
    yield []


__all__ = ["BACKENDS", "Backend", "Kind", "gpu_available", "resolve"]
