"""Opening a backend in a runner process (kept apart from the package so that the judge and the
sandboxes, which only name backends, never import the simulator)."""

from __future__ import annotations

from . import Backend, Kind
from .gpu import Gpu
from .sim import DeviceProcess, InlineSimulator


def open_backend(kind: str, devices: int = 1, device_fd: int | None = None) -> Backend:
    """The backend a runner process uses, set up for this process (which is ours: the runner)."""
    kind = Kind(kind)
    if kind is Kind.GPU:
        return Gpu(devices)
    if device_fd is not None:
        return DeviceProcess(device_fd, devices)
    return InlineSimulator(devices)
