"""The `sim` backend: numba.cuda of the runner process simulated by grader.sim.

`DeviceProcess` is the normal case: launches, device memory, checkers and counters live in the
device process (grader.device), which reports to the judge itself; this process only forwards
numba.cuda's calls. `InlineSimulator` runs the simulator inside the runner (`--simulator
inline`: for debugging and measuring; its records come from the student's process).
"""

from __future__ import annotations

from . import Kind, no_records


class DeviceProcess:
    kind = Kind.SIM

    def __init__(self, device_fd: int, devices: int):
        from ..device.client import connect

        self.devices = devices
        self.device, self._scope = connect(device_fd, devices)

    def launches(self):
        return no_records()  # the device process's records reach the judge from there

    def configure(self, compile_check: bool | None = None) -> None:
        pass  # the judge configures the device process directly

    def describe(self, attributes: dict) -> None:
        """The real GPU's attributes, where the device process runs on one: what host code reads
        of `cuda.get_current_device()` (grid sizes by SM count) is that GPU's."""
        for device in self.device.devices.devices:
            device.describe(attributes)

    def synchronize(self) -> None:
        from numba import cuda

        cuda.synchronize()

    def rank_devices(self) -> int:
        """Devices the ranks of an all-reduce can live on: the virtual devices."""
        return self.devices


class InlineSimulator:
    kind = Kind.SIM

    def __init__(self, devices: int):
        from .. import sim

        sim.tune_process()  # this process is ours (`python -m grader.runner`)
        self.devices = devices
        self.simulator = sim.install(devices=devices, compile_check=True)
        self._trace = sim.trace

    def launches(self):
        return self._trace()

    def configure(self, compile_check: bool | None = None) -> None:
        if compile_check is not None:
            self.simulator.compile_check = bool(compile_check)

    def synchronize(self) -> None:
        pass  # the simulator runs every launch to completion

    def rank_devices(self) -> int:
        return self.devices
