"""Simulated device memory and the host API (`cuda.to_device`, `device_array`, streams, events).

Memory model: an `Allocation` is one flat, typed numpy store plus an `initialised` flag per
element and a virtual byte address (for coalescing counters). A `SimDeviceArray` is a numpy view
into it, so host-side slices of device arrays are views that share memory (and race shadows) with
their base, as on a GPU. Work runs synchronously, in issue order; what a GPU's streams and events
would order (and the races where nothing does) is kept by the simulator's StreamOrder
(grader/sim/streams.py), which every copy, launch, event and synchronisation here reports to.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import NamedTuple

import numpy as np

from .errors import NotSimulatedError, WrongDeviceError

_ids = itertools.count(1)
_ADDRESS_ALIGN = 256
_next_address = [1 << 32]
_address_lock = threading.Lock()


def _as_dtype(dtype) -> np.dtype:
    """numpy dtype of a numpy dtype, a Python type, a string or a numba scalar type."""
    if isinstance(dtype, np.dtype):
        return dtype
    try:
        return np.dtype(dtype)
    except TypeError:
        from numba.np import numpy_support  # numba types (float32, int64, ...) as dtypes

        return numpy_support.as_dtype(dtype)


# the live allocations by id, for a raw pointer's lookup (`pointer_view`)
_live: "weakref.WeakValueDictionary[int, Allocation]" = weakref.WeakValueDictionary()


class Allocation:
    """One device allocation: flat store, initialised flags, device, unique id, byte address."""

    def __init__(self, size: int, dtype: np.dtype, device: int, initialised: bool):
        self.dtype = np.dtype(dtype)
        # 0xFF bytes: NaN for floats, -1 for ints; stale-looking garbage if the checker is off
        self.store = np.full(size * self.dtype.itemsize, 0xFF, np.uint8).view(self.dtype)
        self.initialised = np.full(size, initialised, bool)
        # Per element, whether a kernel stored to it since whoever made these flags last cleared
        # them: made by an observer (the device process follows the bytes the host wrote), None
        # otherwise, which costs the stores nothing.
        self.stored: np.ndarray | None = None
        self.device = device
        self.id = next(_ids)
        with _address_lock:
            self.address = _next_address[0]
            nbytes = max(self.store.nbytes, 1)
            _next_address[0] += (nbytes + _ADDRESS_ALIGN - 1) // _ADDRESS_ALIGN * _ADDRESS_ALIGN
        _live[self.id] = self


def pointer_view(address: int, dtype: np.dtype) -> "SimDeviceArray":
    """A kernel's raw pointer argument (`types.CPointer(T)`: an integer from
    `__cuda_array_interface__`) as the 1-D array of `dtype` from that address to the end of its
    allocation: indexing past the end is an out-of-bounds access, as past the allocation on a GPU."""
    dtype = np.dtype(dtype)
    for alloc in list(_live.values()):
        offset = int(address) - alloc.address
        if 0 <= offset < max(alloc.store.nbytes, 1):
            break
    else:
        raise NotSimulatedError(f"a pointer argument 0x{int(address):x} that points into no simulated "
                                f"allocation (pass the address from an array's __cuda_array_interface__)")
    if dtype != alloc.dtype or offset % dtype.itemsize:
        raise NotSimulatedError(f"a pointer to {dtype} into an allocation of {alloc.dtype} (at byte {offset})")
    return SimDeviceArray(alloc, alloc.store[offset // dtype.itemsize:])


def _layout(view: np.ndarray, alloc: Allocation) -> tuple[int, tuple[int, ...]]:
    """(element offset, element strides) of a numpy view of an allocation's store."""
    base_ptr = alloc.store.__array_interface__["data"][0]
    ptr = view.__array_interface__["data"][0]
    item = alloc.dtype.itemsize
    return (ptr - base_ptr) // item, tuple(s // item for s in view.strides)


class SimDeviceArray:
    """The simulated `DeviceNDArray`: what `cuda.to_device` and `cuda.device_array` return."""

    def __init__(self, alloc: Allocation, view: np.ndarray, sim=None):
        self._alloc = alloc
        self._view = view
        self._sim = sim
        self.offset, self.estrides = _layout(view, alloc)

    # --- numpy-like metadata ---
    shape = property(lambda self: self._view.shape)
    dtype = property(lambda self: self._view.dtype)
    size = property(lambda self: self._view.size)
    ndim = property(lambda self: self._view.ndim)
    strides = property(lambda self: self._view.strides)
    nbytes = property(lambda self: self._view.nbytes)
    device_id = property(lambda self: self._alloc.device)
    alloc_size = property(lambda self: self._alloc.store.nbytes)

    def __len__(self):
        return len(self._view)

    def __repr__(self):
        return f"<SimDeviceArray shape={self.shape} dtype={self.dtype} device={self.device_id}>"

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "strides": self.strides, "typestr": self.dtype.str,
                "data": (self._alloc.address + self.offset * self.dtype.itemsize, False),
                "version": 3}

    def is_c_contiguous(self):
        return self._view.flags.c_contiguous

    def is_f_contiguous(self):
        return self._view.flags.f_contiguous

    def _wrap(self, view: np.ndarray) -> "SimDeviceArray":
        return SimDeviceArray(self._alloc, view, self._sim)

    # --- host-side views ---
    def __getitem__(self, key):
        view = self._view[key]
        if isinstance(view, np.ndarray):
            return self._wrap(view)
        return view  # a scalar read back to the host, as numba does

    def __setitem__(self, key, value):
        order = _order(self._sim)
        if isinstance(value, SimDeviceArray):
            if value.device_id != self.device_id:
                # numba launches its assign kernel on this device, reading the other device's memory
                raise WrongDeviceError(
                    f"a[...] = b with b on device {value.device_id} and a on device {self.device_id}: that "
                    f"reads another device's memory from a kernel; copy it with a.copy_to_device(b) instead",
                    array="setitem")
            if order is not None:
                order.copy(self, value, 0, self._current())
            value = value._view
        elif order is not None:
            order.copy(self, np.asarray(value), 0, self._current())
        self._view[key] = value
        flags = self._flags_view()
        flags[key] = True

    def _current(self) -> int:
        return self._sim.devices.current.id if self._sim is not None else self.device_id

    def _flags_view(self) -> np.ndarray:
        return np.lib.stride_tricks.as_strided(
            self._alloc.initialised[self.offset:], self.shape,
            tuple(s * self._alloc.initialised.itemsize for s in self.estrides))

    def reshape(self, *newshape, order="C"):
        if len(newshape) == 1 and isinstance(newshape[0], (tuple, list)):
            newshape = tuple(newshape[0])
        view = self._view.reshape(newshape, order=order)
        if not np.shares_memory(view, self._alloc.store):
            raise NotImplementedError("reshape of a non-contiguous device array needs a copy")
        return self._wrap(view)

    def ravel(self, order="C"):
        return self.reshape(-1, order=order)

    @property
    def T(self):
        return self.transpose()

    def transpose(self, axes=None):
        """As numba-cuda's: a 2-D array only (a 1-D `d.T` raises there), copied into new memory
        (by a kernel of numba's own there, on the default stream): a kernel storing into `d.T`
        leaves `d` as it was, and reads of `d.T` are of a C-ordered array, not strided ones. The
        identity axes give the array itself."""
        if axes and tuple(axes) == tuple(range(self.ndim)):
            return self
        if self.ndim != 2:
            raise NotImplementedError("transposing a non-2D DeviceNDArray isn't supported")
        if axes is not None and set(axes) != {0, 1}:
            raise ValueError(f"invalid axes list {axes!r}")
        alloc = Allocation(self.size, self.dtype, self.device_id, False)
        copy = SimDeviceArray(alloc, alloc.store.reshape(self.shape[::-1]), self._sim)
        copy.copy_to_device(self.transposed_view())
        return copy

    def transposed_view(self) -> "SimDeviceArray":
        """This 2-D array's transpose as a strided view of its memory (what `transpose` copies)."""
        return self._wrap(self._view.T)

    def view(self, dtype):
        raise NotImplementedError("SimDeviceArray.view(dtype) is not simulated")

    def split(self, section, stream=0):
        return [self[i:i + section] for i in range(0, len(self), section)]

    # --- copies ---
    def copy_to_host(self, ary=None, stream=0):
        order = _order(self._sim)
        if order is not None:
            order.copy(ary if ary is not None else np.empty(0), self, stream, self._current())
        if ary is None:
            return np.array(self._view, copy=True)
        if ary.shape != self.shape or ary.dtype != self.dtype:
            raise TypeError(f"copy_to_host: array {ary.shape} {ary.dtype} does not match "
                            f"{self.shape} {self.dtype}")
        ary[...] = self._view
        return ary

    def copy_to_device(self, ary, stream=0):
        if isinstance(ary, SimDeviceArray):
            if ary.size != self.size or ary.dtype != self.dtype:
                raise ValueError("copy_to_device: shape or dtype mismatch")
            if ary.device_id != self.device_id and self._sim is not None:
                self._sim.devices.record_peer_copy(ary.device_id, self.device_id, ary.nbytes)
            source = ary._view
        else:
            source = np.asarray(ary)
        order = _order(self._sim)
        if order is not None:
            order.copy(self, ary if isinstance(ary, SimDeviceArray) else source, stream, self._current())
        if source.size != self.size:
            raise ValueError(f"copy_to_device: {source.shape} does not fit {self.shape}")
        self._view[...] = source.reshape(self.shape)
        self._flags_view()[...] = True


class DeviceBuffer:
    """An array argument as executors see it for one launch (see docs/SIMULATOR_DESIGN.md).

    `flat` is the whole allocation's 1-D store, `initialised` its flags and `stored` its
    kernel-store flags (`Allocation.stored`, or None); `index` in `memory.Instrument` maps kernel
    indices to positions in `flat`.
    """

    __slots__ = ("array", "name", "data", "flat", "initialised", "stored", "offset", "estrides", "shape",
                 "dtype", "device", "buffer_id", "address", "host")

    def __init__(self, array: SimDeviceArray, name: str, host: np.ndarray | None = None):
        self.array = array
        self.name = name
        self.data = array._view
        self.flat = array._alloc.store
        self.initialised = array._alloc.initialised
        self.stored = array._alloc.stored
        self.offset = array.offset
        self.estrides = array.estrides
        self.shape = array.shape
        self.dtype = array.dtype
        self.device = array.device_id
        self.buffer_id = array._alloc.id
        self.address = array._alloc.address
        self.host = host  # the numpy array to copy back into after the launch, if any


def device_buffers(value) -> list[DeviceBuffer]:
    """The DeviceBuffers in a bound argument (or a list of them), tuples looked into."""
    if isinstance(value, DeviceBuffer):
        return [value]
    if isinstance(value, (tuple, list)):
        return [b for v in value for b in device_buffers(v)]
    return []


def _order(sim):
    """The stream order of `sim` (a Simulator), or None (the device process's client keeps none)."""
    return getattr(sim, "streams", None)


class SimStream:
    """A stream of a simulated device. Work runs at once; what the stream would order on a GPU is
    kept by the simulator's StreamOrder under this stream's `id`."""

    def __init__(self, device: int, sim=None, ident: int | None = None):
        self.device = device
        self._sim = sim
        order = _order(sim)
        self.id = ident if ident is not None or order is None else order.new_stream(device)

    def synchronize(self):
        order = _order(self._sim)
        if order is not None:
            order.sync_stream(self, self.device)

    def auto_synchronize(self):
        import contextlib

        return contextlib.nullcontext(self)

    def add_callback(self, callback, arg=None):
        callback(self, None, arg)

    def name_as(self, name: str) -> None:
        """What messages call this stream (the grader's own streams: "r.stream of rank 2")."""
        order = _order(self._sim)
        if order is not None:
            order.name_stream(self.id, name)

    def __repr__(self):
        return f"<SimStream on device {self.device}>"


class SimEvent:
    """An event; `elapsed_time` is the difference of *modelled* times: when the performance
    model's timeline reaches the event (grader/sim/event_clock.py), not a measurement."""

    def __init__(self, sim, timing=True):
        self._sim = sim
        self.time_ms: float | None = None
        self.device: int | None = None
        self.made_on = sim.devices.current.id  # CUDA: an event records only on its own device's streams
        self.order_clock: dict | None = None

    def record(self, stream=0):
        dev = self._sim.devices.current if not isinstance(stream, SimStream) \
            else self._sim.devices[stream.device]
        order = _order(self._sim)
        if order is not None:
            order.record(self, stream, dev.id)
        self.device = dev.id
        clock = getattr(self._sim, "clock", None)
        self.time_ms = clock.ms_at(self.order_clock or {}) if clock is not None else 0.0

    def synchronize(self):
        order = _order(self._sim)
        if order is not None:
            order.sync_event(self)

    def wait(self, stream=0):
        order = _order(self._sim)
        if order is not None:
            order.wait(self, stream, self._sim.devices.current.id)

    def query(self):
        return True

    def elapsed_time(self, end: "SimEvent") -> float:
        if self.time_ms is None or end.time_ms is None:
            raise RuntimeError("elapsed_time: both events must be recorded first")
        if self.device != end.device:  # two devices' clocks: CUDA refuses (invalid handle)
            raise WrongDeviceError(f"elapsed_time of an event recorded on device {self.device} and one on device "
                                   f"{end.device}: CUDA measures between events of one device only")
        return end.time_ms - self.time_ms


class MemoryInfo(NamedTuple):
    free: int
    total: int


class SimContext:
    """What `cuda.current_context()` (and numba's `cudadrv.devices.get_context()`) return: the
    context of a simulated device. It has the device, peer access (every other simulated device:
    peer copies are simulated), streams, events and synchronisation; anything else a driver
    context does raises NotSimulatedError naming it."""

    TOTAL_MEMORY = 141 * 1024**3  # an H200's, for get_memory_info

    def __init__(self, sim, device):
        self._sim = sim
        self.device = device

    def can_access_peer(self, peer_device) -> bool:
        peer = int(getattr(peer_device, "id", peer_device))
        return peer != self.device.id and 0 <= peer < len(self._sim.devices)

    def get_memory_info(self) -> MemoryInfo:
        return MemoryInfo(self.TOTAL_MEMORY, self.TOTAL_MEMORY)

    def synchronize(self):
        self._sim.host.sync_device(self.device.id)

    def reset(self):
        pass

    def push(self):
        pass

    def pop(self):
        pass

    def prepare_for_use(self):
        pass

    def get_default_stream(self):
        return self._sim.host.default_stream_of(self.device.id)

    get_legacy_default_stream = get_per_thread_default_stream = get_default_stream

    def create_stream(self):
        return self._sim.host.stream_on(self.device.id)

    def create_event(self, timing=True):
        with self._sim.gpus[self.device.id]:
            return SimEvent(self._sim, timing)

    def enable_peer_access(self, peer_context, flags=0):
        """Peer copies are always simulated; the call is recorded as done (a second call for the
        same peer fails in CUDA: PEER_ACCESS_ALREADY_ENABLED)."""
        peer = getattr(getattr(peer_context, "device", None), "id", peer_context)
        enabled = self._sim.devices.peer_access.setdefault(self.device.id, set())
        if peer in enabled:
            raise RuntimeError(f"peer access from device {self.device.id} to {peer} is already enabled "
                               f"(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)")
        enabled.add(peer)

    @property
    def handle(self):
        return self.device.id

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotSimulatedError(f"cuda.current_context().{name} is not simulated")

    def __eq__(self, other):
        return isinstance(other, SimContext) and other.device is self.device

    def __hash__(self):
        return hash(self.device.id)

    def __repr__(self):
        return f"<SimContext of device {self.device.id}>"


class HostAPI:
    """The functions that replace `numba.cuda.to_device` & co. while the simulator is installed."""

    def __init__(self, sim):
        self._sim = sim

    def _current(self) -> int:
        return self._sim.devices.current.id

    def _new(self, shape, dtype, initialised: bool, order="C") -> SimDeviceArray:
        shape = (shape,) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
        dtype = _as_dtype(dtype)
        size = int(np.prod(shape, dtype=np.int64))
        alloc = Allocation(size, dtype, self._current(), initialised)
        view = alloc.store.reshape(shape, order="F" if order == "F" else "C")
        return SimDeviceArray(alloc, view, self._sim)

    def to_device(self, obj, stream=0, copy=True, to=None):
        if to is not None:
            to.copy_to_device(obj, stream)
            return to
        if self.is_cuda_array(obj):
            return obj  # numba returns a device array as it is, on its own device (numba/numba#3483)
        host = np.asarray(obj)
        order = "F" if host.flags.f_contiguous and not host.flags.c_contiguous else "C"
        return self._from_host(host, order, copy)

    def _from_host(self, host: np.ndarray, order: str, copy: bool):
        """A new device array of `host`'s shape and dtype, holding a copy of it when `copy`."""
        out = self._new(host.shape, host.dtype, True, order)
        if copy:
            out.copy_to_device(host)
        return out

    def device_to_device(self, dst, src, size, stream=0):
        """numba's `cudadrv.driver.device_to_device`: a whole-array copy between device arrays
        (any device: counted as a peer copy when they differ)."""
        if int(size) != dst.nbytes or int(size) != src.nbytes:
            raise NotSimulatedError(f"device_to_device of {size} bytes between arrays of {src.nbytes} and "
                                    f"{dst.nbytes} bytes: only whole-array copies are simulated")
        dst.copy_to_device(src, stream)

    def device_array(self, shape, dtype=np.float64, strides=None, order="C", stream=0):
        return self._new(shape, dtype, False, order)

    def device_array_like(self, ary, stream=0):
        order = "F" if ary.ndim > 1 and getattr(ary, "is_f_contiguous", lambda: False)() \
            and not getattr(ary, "is_c_contiguous", lambda: True)() else "C"
        if isinstance(ary, np.ndarray):
            order = "F" if ary.flags.f_contiguous and not ary.flags.c_contiguous else "C"
        return self._new(ary.shape, ary.dtype, False, order)

    # host memory kinds are plain numpy arrays here
    def pinned_array(self, shape, dtype=np.float64, strides=None, order="C"):
        return np.empty(shape, _as_dtype(dtype), order=order)

    def pinned_array_like(self, ary):
        return np.empty_like(ary)

    def mapped_array(self, shape, dtype=np.float64, strides=None, order="C", stream=0,
                     portable=False, wc=False):
        return np.empty(shape, _as_dtype(dtype), order=order)

    def mapped_array_like(self, ary, stream=0, portable=False, wc=False):
        return np.empty_like(ary)

    def managed_array(self, shape, dtype=np.float64, strides=None, order="C", stream=0,
                      attach_global=True):
        return np.empty(shape, _as_dtype(dtype), order=order)

    def synchronize(self):
        self.sync_device(self._current())

    def sync_device(self, device: int) -> None:
        order = _order(self._sim)
        if order is not None:
            order.sync_device(device)

    def is_available(self):
        return True

    def is_cuda_array(self, obj):
        return isinstance(obj, SimDeviceArray)

    def stream(self):
        return self.stream_on(self._current())

    def stream_on(self, device: int) -> SimStream:
        return SimStream(device, self._sim)

    def default_stream(self):
        return self.default_stream_of(self._current())

    def default_stream_of(self, device: int) -> SimStream:
        """The device's legacy default stream: one object per device, as numba's."""
        defaults = self.__dict__.setdefault("_defaults", {})
        if device not in defaults:
            order = _order(self._sim)
            defaults[device] = SimStream(device, self._sim, order.default(device) if order is not None else 0)
        return defaults[device]

    legacy_default_stream = default_stream
    per_thread_default_stream = default_stream

    def event(self, timing=True):
        return SimEvent(self._sim, timing)

    def event_elapsed_time(self, evtstart, evtend):
        return evtstart.elapsed_time(evtend)

    def select_device(self, device_id):
        return self._sim.devices.select(device_id)

    def get_current_device(self):
        return self._sim.devices.current

    def current_context(self, devnum=None):
        """`cuda.current_context()` / numba's `cudadrv.devices.get_context(devnum)`."""
        devices = self._sim.devices
        return SimContext(self._sim, devices.current if devnum is None else devices[devnum])

    def list_devices(self):
        return list(self._sim.devices)

    def close(self):
        pass

    def detect(self):
        for dev in self._sim.devices:
            print(f"Found simulated device {dev.id}: {dev.name}, compute capability 9.0")
        return True

    def pinned(self, *arylist):
        import contextlib

        return contextlib.nullcontext()

    mapped = pinned


def check_device(array: SimDeviceArray, device: int, kernel: str, name: str) -> None:
    """Raise WrongDeviceError when a launch on `device` is given an array of another device."""
    if array.device_id != device:
        raise WrongDeviceError(
            f"kernel {kernel!r}: argument {name!r} lives on device {array.device_id} but the "
            f"kernel is launched on device {device}: launch it on device {array.device_id}, or copy the "
            f"data to device {device} first (in the all-reduce exercise: ranks.copy; cuda.to_device of a device "
            f"array copies nothing, it returns that same array)", kernel=kernel, array=name)
