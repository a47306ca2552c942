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


def _on_device(value) -> bool:
    """A device array (numba's, CuPy's, ...), not a host array or a scalar."""
    return hasattr(value, "__cuda_array_interface__") or hasattr(value, "copy_to_host")


class Gpu:
    kind = Kind.GPU

    def __init__(self, devices: int):
        self.devices = devices

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

    def synchronize(self) -> None:
        from numba import cuda

        cuda.synchronize()
