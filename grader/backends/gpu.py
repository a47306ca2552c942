"""The `gpu` backend: real numba-cuda on the machine's NVIDIA GPUs; nothing is patched."""

from __future__ import annotations

from . import Kind, no_records


class Gpu:
    kind = Kind.GPU

    def __init__(self, devices: int):
        self.devices = devices

    def launches(self):
        return no_records()

    def configure(self, compile_check: bool | None = None) -> None:
        pass  # ptxas checks are the simulator's; a GPU compiles for real

    def synchronize(self) -> None:
        from numba import cuda

        cuda.synchronize()
