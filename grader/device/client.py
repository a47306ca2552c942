"""The runner's side of the simulated GPU: numba.cuda's host API and launches, as requests to the
device process (grader.device.server) over one socket.

`connect(fd, devices)` installs it: every `cuda.to_device`, `device_array`, `copy_to_host`, slice,
launch and event of the student's host code becomes a message; device memory lives only in the
device process, so nothing here holds a counter, a launch record or a finding. The patches are
the simulator's own (grader.sim.patching.apply), with this object standing where a `Simulator`
stands. Device selection (`cuda.select_device`, `with cuda.gpus[i]:`) is host-thread state and
stays here; each request names its device.
"""

from __future__ import annotations

import socket
import threading
import weakref

import numpy as np

from .. import wire
from ..wire import dtypes, shared
from ..sim import LaunchTarget
from ..sim import errors as sim_errors
from ..sim import patching
from ..sim.argtypes import declared_argtypes
from ..sim.devices import Devices, GpuList
from ..sim.eager import Signatures
from ..sim.host import HostAPI, SimEvent, SimStream, _as_dtype
from ..sim.sites import launch_site, launch_stack
from .package import NotCompilable, NotPackable, pack

BOUNDS = wire.Bounds(json_bytes=16 << 20, frame_bytes=2 << 30)


class DeviceError(RuntimeError):
    """The device process refused a request for a reason that is not a simulator finding."""


# what a host-API call refused for a plain reason raises here, as it would with a local simulator
_BUILTIN_ERRORS = {cls.__name__: cls for cls in (TypeError, ValueError, IndexError, KeyError)}


def _raise(error: dict) -> None:
    """The device's error, as the exception the student's code would see from a local simulator."""
    name, message = str(error.get("type", "")), str(error.get("message", ""))
    if error.get("where") and name == "IndexError" and message.startswith("tid="):
        # numba's stock simulator (standing in for a GPU) checks every index itself: no raise of the kernel's
        message = (f"{message} (at {error['where']}: an index outside the array; on a GPU the access reads or "
                   f"writes whatever memory is there, or stops the kernel with an illegal address)")
    elif error.get("where"):  # raised by a kernel's own code, which ran in the device process
        message = (f"{message} (raised at {error['where']}; on a GPU numba ignores a kernel's raise unless it is "
                   f"@cuda.jit(debug=True): the thread just ends, and nothing says so; end a thread with return)")
    cls = getattr(sim_errors, name, None) or _BUILTIN_ERRORS.get(name)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            exc = cls(message)
        except TypeError:
            exc = DeviceError(f"{name}: {message}")
        raise exc
    raise DeviceError(f"{name}: {message}" if name else message)


class Channel:
    """Requests to the device process; one at a time (host code may use threads)."""

    def __init__(self, fd: int):
        self._sock = socket.socket(fileno=fd)
        self._lock = threading.Lock()
        self._freed: list[int] = []
        self._lost = ""  # why the device process is gone, once it is: every later request says so

    def request(self, message: dict) -> dict:
        site = launch_site()  # where the student's code asked, for the messages of findings only
        message = dict(message, site=list(site) if site else None, stack=[list(f) for f in launch_stack()])
        with self._lock:
            if self._freed:
                message = dict(message, free=self._freed)
                self._freed = []
            if self._lost:
                raise DeviceError(self._lost)
            try:
                reply = shared.exchange(self._sock, message, BOUNDS)  # arrays through sealed shared memory
            except (EOFError, ConnectionError) as exc:
                # the device process ended: the judge kills it at a limit (a kernel that never ends,
                # memory filled), or it crashed; the judge says which when the call ends
                self._lost = (f"{wire.DEVICE_STOPPED}: its process ended during this request ({exc}); "
                              f"it is stopped when a kernel runs past the time limit or fills the memory")
                raise DeviceError(self._lost) from None
        if not isinstance(reply, dict) or not reply.get("ok"):
            _raise((reply or {}).get("error") or {} if isinstance(reply, dict) else {})
        return reply

    def free(self, handle: int) -> None:
        self._freed.append(handle)  # sent with the next request


def _key(key) -> list:
    """An index of a device array as data: ints, slices, Ellipsis, None."""
    items = key if isinstance(key, tuple) else (key,)
    out = []
    for item in items:
        if isinstance(item, slice):
            out.append({"slice": [_opt_int(item.start), _opt_int(item.stop), _opt_int(item.step)]})
        elif item is Ellipsis:
            out.append({"ellipsis": True})
        elif item is None:
            out.append({"newaxis": True})
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            out.append(int(item))
        else:
            raise TypeError(f"device arrays take integer and slice indices, not {type(item).__name__}")
    return out


def _opt_int(value):
    return None if value is None else int(value)


class RemoteDeviceArray:
    """A device array that lives in the device process: here only its handle and shape."""

    def __init__(self, device: "RemoteDevice", reply: dict):
        self._device = device
        self._handle = int(reply["handle"])
        self.shape = tuple(int(s) for s in reply["shape"])
        self.strides = tuple(int(s) for s in reply["strides"])
        self.dtype = dtypes.parse(reply["dtype"])
        self.device_id = int(reply["device"])
        self._address = int(reply.get("address", 0))
        self._c, self._f = bool(reply.get("c_contiguous", True)), bool(reply.get("f_contiguous", False))
        weakref.finalize(self, device.channel.free, self._handle)

    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))
    ndim = property(lambda self: len(self.shape))
    nbytes = property(lambda self: self.size * self.dtype.itemsize)

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"<SimDeviceArray shape={self.shape} dtype={self.dtype} device={self.device_id}>"

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "strides": self.strides, "typestr": self.dtype.str,
                "data": (self._address, False), "version": 3}

    def is_c_contiguous(self):
        return self._c

    def is_f_contiguous(self):
        return self._f

    def _request(self, op: str, **fields) -> dict:
        return self._device.channel.request({"op": op, "handle": self._handle, **fields})

    def copy_to_host(self, ary=None, stream=0):
        data = self._request("download", stream=_stream_id(stream))["data"]
        if ary is None:
            return data
        if ary.shape != self.shape or ary.dtype != self.dtype:
            raise TypeError(f"copy_to_host: array {ary.shape} {ary.dtype} does not match {self.shape} {self.dtype}")
        ary[...] = data
        return ary

    def copy_to_device(self, ary, stream=0):
        if isinstance(ary, RemoteDeviceArray):
            self._request("copy", source=ary._handle, stream=_stream_id(stream),
                          device=self._device.devices.current.id)
            return
        source = np.asarray(ary)
        if source.size != self.size:
            raise ValueError(f"copy_to_device: {source.shape} does not fit {self.shape}")
        self._request("upload", data=np.ascontiguousarray(source), stream=_stream_id(stream))

    def __getitem__(self, key):
        reply = self._request("view", key=_key(key))
        if "scalar" in reply:
            return reply["scalar"]
        return RemoteDeviceArray(self._device, reply)

    def __setitem__(self, key, value):
        current = self._device.devices.current.id
        if isinstance(value, RemoteDeviceArray):  # device to device, in the device process
            self._request("setitem", key=_key(key), source=value._handle, device=current)
            return
        value = np.asarray(value)
        self._request("setitem", key=_key(key), data=np.ascontiguousarray(value), device=current)

    def reshape(self, *newshape, order="C"):
        if len(newshape) == 1 and isinstance(newshape[0], (tuple, list)):
            newshape = tuple(newshape[0])
        return RemoteDeviceArray(self._device, self._request("reshape", shape=[int(s) for s in newshape],
                                                             order=order))

    def ravel(self, order="C"):
        return self.reshape(-1, order=order)

    @property
    def T(self):
        return self.transpose()

    def transpose(self, axes=None):
        return RemoteDeviceArray(self._device, self._request(
            "transpose", axes=None if axes is None else [int(a) for a in axes]))

    def view(self, dtype):
        raise sim_errors.NotSimulatedError("DeviceNDArray.view(dtype) is not simulated")

    def split(self, section, stream=0):
        return [self[i:i + section] for i in range(0, len(self), section)]


def _stream_id(stream) -> int:
    """A stream as the device process knows it: its handle, or 0 (the default stream)."""
    return int(getattr(stream, "id", 0) or 0)


class RemoteStream(SimStream):
    """A stream made in the device process (what it orders is kept there)."""

    def synchronize(self):
        self._sim.channel.request({"op": "sync", "stream": self.id, "device": self.device})

    def name_as(self, name: str) -> None:
        self._sim.channel.request({"op": "name_stream", "stream": self.id, "name": name})


class RemoteEvent(SimEvent):
    """An event made in the device process; `elapsed_time` is the difference of the modelled times
    the device process gave each when it was recorded (grader/sim/event_clock.py)."""

    def __init__(self, sim, timing=True):
        super().__init__(sim, timing)
        self.id = int(sim.channel.request({"op": "event", "device": self.made_on})["event"])

    def record(self, stream=0):
        device = self._sim  # a RemoteDevice
        self.device = stream.device if isinstance(stream, SimStream) else device.devices.current.id
        self.time_ms = float(device.channel.request({"op": "record", "event": self.id, "stream": _stream_id(stream),
                                                     "device": device.devices.current.id})["ms"])

    def wait(self, stream=0):
        self._sim.channel.request({"op": "wait", "event": self.id, "stream": _stream_id(stream),
                                   "device": self._sim.devices.current.id})

    def synchronize(self):
        self._sim.channel.request({"op": "sync", "event": self.id})


class RemoteHostAPI(HostAPI):
    """The simulator's host API with device memory, copies and events in the device process."""

    def _new(self, shape, dtype, initialised: bool, order="C") -> RemoteDeviceArray:
        shape = (shape,) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
        reply = self._sim.channel.request({"op": "alloc", "device": self._current(), "shape": list(shape),
                                           "dtype": dtypes.describe(_as_dtype(dtype)), "order": "F" if order == "F" else "C",
                                           "initialised": initialised})
        return RemoteDeviceArray(self._sim, reply)

    def _from_host(self, host: np.ndarray, order: str, copy: bool) -> RemoteDeviceArray:
        if not copy:
            return self._new(host.shape, host.dtype, True, order)
        # allocation and upload in one request
        reply = self._sim.channel.request({"op": "alloc", "device": self._current(), "shape": list(host.shape),
                                           "dtype": dtypes.describe(host.dtype), "order": order, "initialised": True,
                                           "data": np.ascontiguousarray(host)})
        return RemoteDeviceArray(self._sim, reply)

    def is_cuda_array(self, obj):
        return isinstance(obj, RemoteDeviceArray)

    def event(self, timing=True):
        return RemoteEvent(self._sim, timing)

    def stream_on(self, device: int) -> RemoteStream:
        reply = self._sim.channel.request({"op": "stream", "device": device})
        return RemoteStream(device, self._sim, int(reply["stream"]))

    def default_stream_of(self, device: int) -> RemoteStream:
        defaults = self.__dict__.setdefault("_defaults", {})
        return defaults.setdefault(device, RemoteStream(device, self._sim, 0))

    def sync_device(self, device: int) -> None:
        self._sim.channel.request({"op": "sync", "device": device})


class _Declared:
    """Eager signatures (`cuda.jit("void(float32[:])")`): recorded here, typed in the device."""

    def __init__(self, current_device=None):
        self._declared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # the kernels' `.overloads` entries, as under a simulator (grader.sim.eager.Overload)
        self._overloads = Signatures(current_device)

    def declare(self, dispatcher, sig) -> None:
        argtypes = declared_argtypes(sig)
        known = self._declared.setdefault(dispatcher, [])
        if argtypes not in known:
            known.append(argtypes)
        self._overloads.add_overload(dispatcher, argtypes)

    def remove_overloads(self) -> None:
        self._overloads.remove_overloads()

    def declared(self, dispatcher) -> list:
        return list(self._declared.get(dispatcher, ()))

    def inspect(self, dispatcher, kind, signature=None):
        raise sim_errors.NotSimulatedError(f"inspect_{kind}() of a kernel is not available in the runner")


class RemoteDevice(LaunchTarget):
    """Stands where a `grader.sim.Simulator` stands for numba's patches (grader.sim.patching)."""

    def __init__(self, channel: Channel, devices: int):
        self.channel = channel
        self.devices = Devices(devices)
        self.gpus = GpuList(self.devices)
        self.host = RemoteHostAPI(self)
        self.signatures = _Declared(lambda: self.devices.current)
        self._packages: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _package(self, dispatcher) -> dict:
        """The kernel as data, made at its first launch (numba, too, freezes a kernel's globals
        when it first compiles it); later launches name it by id."""
        known = self._packages.get(dispatcher)
        if known is not None:
            return {"id": known}
        try:
            package = pack(dispatcher, self.signatures.declared)
        except NotCompilable as exc:  # (as the compile check says it at a launch: the kernel, the student's line)
            name = dispatcher.py_func.__name__
            raise sim_errors.CompileError(f"kernel {name!r} would not compile for a GPU: {exc.report.message}",
                                          kernel=name, filename=exc.report.filename, line=exc.report.lineno) from None
        except NotPackable as exc:
            raise sim_errors.NotSimulatedError(str(exc)) from None
        self._packages[dispatcher] = package["id"]
        return package

    def launch(self, dispatcher, griddim, blockdim, args, stream=0, sharedmem=0) -> None:
        device = self.devices.current.id  # (the launch's stream must be one of its: the device process checks)
        hosts: list[np.ndarray | None] = []
        encoded = [self._arg(a, hosts) for a in args]
        reply = self.channel.request({"op": "launch", "kernel": self._package(dispatcher), "device": device,
                                      "stream": _stream_id(stream),
                                      "grid": _dims(griddim), "block": _dims(blockdim),
                                      "sharedmem": int(sharedmem) if isinstance(sharedmem, (int, np.integer))
                                      else sharedmem, "args": encoded})
        back = reply.get("writeback") or []
        for host, data in zip([h for h in hosts if h is not None], back):
            host[...] = data  # numba copies a host array argument back after the launch

    def _arg(self, value, hosts: list):
        if isinstance(value, RemoteDeviceArray):
            return {"handle": value._handle}
        if isinstance(value, np.ndarray):
            writeback = value.flags.writeable
            hosts.append(value if writeback else None)
            return {"host": np.ascontiguousarray(value), "order": "F" if value.flags.f_contiguous and
                    not value.flags.c_contiguous else "C", "writeback": writeback}
        if isinstance(value, tuple):
            return {"tuple": [self._arg(v, hosts) for v in value]}
        if hasattr(value, "__cuda_array_interface__"):
            raise sim_errors.NotSimulatedError(f"a kernel argument of type {type(value).__name__}: the simulator "
                                               f"takes numpy arrays and arrays from cuda.to_device / device_array")
        if isinstance(value, (bool, int, float, complex, np.generic)):
            return {"value": value} if not isinstance(value, complex) else {"complex": [value.real, value.imag]}
        raise TypeError(f"a kernel argument of type {type(value).__name__} cannot be passed to a GPU: a kernel takes "
                        f"arrays (NumPy arrays, or device arrays from cuda.to_device / cuda.device_array), numbers, "
                        f"and tuples of them (np.array(...) makes an array of a list)")


def _dims(value):
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (tuple, list)):
        return [int(v) for v in value]
    if hasattr(value, "x"):
        return [int(value.x), int(value.y), int(value.z)]
    return value


def connect(fd: int, devices: int):
    """Route this process's numba.cuda to the device process on socket `fd`; returns the
    PatchScope (its `restore()` undoes every patch)."""
    device = RemoteDevice(Channel(fd), devices)
    return device, patching.apply(device)


__all__ = ["connect", "RemoteDevice", "RemoteDeviceArray", "DeviceError"]
