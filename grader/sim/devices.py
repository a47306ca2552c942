"""Virtual GPUs: N simulated devices, the current device of each host thread, peer-copy links.

Each device carries the limits a launch is validated against (an sm_90-like part); events' times
are the performance model's (grader/sim/event_clock.py).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass

# The one compute capability everything simulated targets: the devices report it, kernels are
# typed, compiled and ptxas-checked for it, occupancy is computed for its SM (an H100/H200).
TARGET_CC = (9, 0)


# numba Device attributes host code reads (grid sizing, limits) that a real GPU's device process
# reports for the runner's virtual devices (`VirtualDevice.describe`)
REPORTED_ATTRIBUTES = ("MULTIPROCESSOR_COUNT", "MAX_THREADS_PER_BLOCK", "MAX_SHARED_MEMORY_PER_BLOCK", "WARP_SIZE")


@dataclass
class Limits:
    max_threads_per_block: int = 1024
    max_block_dim: tuple[int, int, int] = (1024, 1024, 64)
    max_grid_dim: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    default_shared_bytes: int = 48 * 1024  # without an opt-in, static + dynamic
    max_shared_bytes_optin: int = 227 * 1024
    warp_size: int = 32
    multiprocessor_count: int = 132


@dataclass
class LinkStats:
    bytes: int = 0
    count: int = 0


class VirtualDevice:
    """One simulated GPU; also the object `cuda.gpus[i]` and `get_current_device()` return."""

    def __init__(self, devices: "Devices", ident: int):
        self._devices = devices
        self.id = ident
        self.name = f"Simulated GPU {ident} (gpugrade)"
        self.compute_capability = TARGET_CC
        self.limits = Limits()
        # numba's Device attributes that host code commonly reads
        self.MAX_THREADS_PER_BLOCK = self.limits.max_threads_per_block
        self.MAX_BLOCK_DIM_X, self.MAX_BLOCK_DIM_Y, self.MAX_BLOCK_DIM_Z = self.limits.max_block_dim
        self.MAX_GRID_DIM_X, self.MAX_GRID_DIM_Y, self.MAX_GRID_DIM_Z = self.limits.max_grid_dim
        self.MAX_SHARED_MEMORY_PER_BLOCK = self.limits.default_shared_bytes
        self.MULTIPROCESSOR_COUNT = self.limits.multiprocessor_count
        self.WARP_SIZE = self.limits.warp_size

    # half precision from cc 5.3, bfloat16 from 8.0, fp8 from 8.9 (numba's Device); derived, so a
    # real GPU's compute capability (`describe`) says them too
    supports_float16 = property(lambda self: self.compute_capability >= (5, 3))
    supports_bfloat16 = property(lambda self: self.compute_capability >= (8, 0))
    supports_fp8 = property(lambda self: self.compute_capability >= (8, 9))

    def describe(self, attributes: dict) -> None:
        """Report a real GPU's attributes (its device process's): positive integers only, a name."""
        for key in REPORTED_ATTRIBUTES:
            value = attributes.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 31:
                setattr(self, key, value)
        capability = attributes.get("compute_capability")
        if isinstance(capability, list) and len(capability) == 2 and all(isinstance(v, int) for v in capability):
            self.compute_capability = tuple(capability)
        if isinstance(attributes.get("name"), str):
            self.name = attributes["name"][:200]

    # `with cuda.gpus[i]:` makes this device current for the block
    def __enter__(self):
        self._devices._push(self.id)
        return self

    def __exit__(self, *exc):
        self._devices._pop()
        return False

    def reset(self):
        pass

    def __repr__(self):
        return f"<VirtualDevice {self.id}: {self.name}>"


class Devices:
    """The simulated GPUs of one installation. The current device is per host thread, as in CUDA."""

    def __init__(self, count: int = 1):
        if count < 1:
            raise ValueError("the simulator needs at least one device")
        self.devices = [VirtualDevice(self, i) for i in range(count)]
        self._local = threading.local()
        self._links: dict[tuple[int, int], LinkStats] = defaultdict(LinkStats)
        self._links_lock = threading.Lock()
        self.peer_access: dict[int, set[int]] = {}  # device -> peers enable_peer_access was called for

    def __len__(self):
        return len(self.devices)

    def __getitem__(self, i: int) -> VirtualDevice:
        if not 0 <= i < len(self.devices):
            raise IndexError(f"no simulated device {i}: {len(self.devices)} configured (a script of yours: "
                             f"`gpugrade run --devices {max(int(i) + 1, 2)} SCRIPT` simulates that many)")
        return self.devices[i]

    def __iter__(self):
        return iter(self.devices)

    def _stack(self) -> list[int]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = [0]
        return stack

    @property
    def current(self) -> VirtualDevice:
        return self.devices[self._stack()[-1]]

    def select(self, i: int) -> VirtualDevice:
        dev = self[i]
        self._stack()[-1] = i
        return dev

    def _push(self, i: int):
        self[i]
        self._stack().append(i)

    def _pop(self):
        stack = self._stack()
        if len(stack) > 1:
            stack.pop()

    def record_peer_copy(self, src: int, dst: int, nbytes: int) -> None:
        with self._links_lock:
            link = self._links[(src, dst)]
            link.bytes += nbytes
            link.count += 1

    def links(self) -> dict[tuple[int, int], LinkStats]:
        """Peer copies so far: {(src, dst): LinkStats(bytes, count)}."""
        with self._links_lock:
            return {k: LinkStats(v.bytes, v.count) for k, v in self._links.items()}

    def reset_links(self) -> None:
        with self._links_lock:
            self._links.clear()


class GpuList:
    """What `cuda.gpus` is while installed: indexable, iterable, with `.current`."""

    def __init__(self, devices: Devices):
        self._devices = devices

    def __getitem__(self, i):
        return self._devices[i]

    def __len__(self):
        return len(self._devices)

    def __iter__(self):
        return iter(self._devices)

    @property
    def current(self):
        return self._devices.current

    @property
    def lst(self):
        return list(self._devices)
