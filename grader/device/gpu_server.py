"""The device process on a real GPU: the runner's requests served by numba-cuda, each kernel timed here.

`python -m grader.device --gpu` speaks the device protocol of grader.device.server (the runner's
client, grader.device.client, cannot tell the two apart), with device memory on the machine's GPU
instead of the simulator's. It exists for timing: the student's host code runs in the runner,
which never holds the GPU; every kernel is built here from its package (no module of the student's
is imported here either) and launched between two CUDA events on its stream, and the call's report
to the judge carries each launch's time. So the times a speed is graded on come from a process the
student's code cannot touch, as the simulator's counters do (docs/GPU_TIMING.md).

The report's data flow is kept per allocation: an upload's digest, a download's digest, and
whether a kernel of the call wrote the memory it came from and from which uploads. Which
parameters a kernel reads and writes is read from its code (`accesses`): a parameter indexed on
the left of an assignment is written, indexed elsewhere read, passed on or named otherwise both.
Less precise than the simulator's element-by-element record (which stays the proof at the
correctness tests' sizes); enough to tell an answer the host computed at the timed sizes.

`NUMBA_ENABLE_CUDASIM=1` puts numba's stock simulator where the GPU would be (the code path without
a GPU, for tests; its events have no times, so the host's clock around each launch stands in).
"""

from __future__ import annotations

import ast
import sys
import time
from typing import Any

import numpy as np

from ..backends.gpu import (STOCK_SIMULATOR_SMS, _dim3, _event_ms, gpu_count, gpu_name, hold_gpu, l2_flush_bytes,
                            sticky_cuda_error)
from ..sim.devices import REPORTED_ATTRIBUTES
from ..wire import dtypes
from ..wire.messages import error_reply
from .package import Builder
from .server import Device, _dims, _host_array, _index

_SHAPE_ATTRIBUTES = {"shape", "size", "ndim", "dtype", "strides", "itemsize", "nbytes"}  # no data read


class _Alloc:
    """One allocation (views share it): its number, for the data flow."""

    __slots__ = ("id",)

    def __init__(self, number: int):
        self.id = number


class Held:
    """A device array the runner holds: numba's array and the allocation it views."""

    __slots__ = ("array", "_alloc")

    def __init__(self, array, alloc: _Alloc):
        self.array, self._alloc = array, alloc

    shape = property(lambda self: tuple(self.array.shape))
    dtype = property(lambda self: np.dtype(self.array.dtype))


class GpuDevice(Device):
    """The device protocol on numba-cuda (see module doc). Reuses the simulated device's request
    handling, upload and download records; replaces its memory, launches and streams."""

    def _open(self, devices: int) -> Builder:
        """numba-cuda on the machine's GPU (numba's stock simulator in its place, for tests)."""
        from numba import cuda
        from numba.cuda import config

        self.cuda = cuda
        self.stock = bool(config.ENABLE_CUDASIM)
        self._errors = ()  # (the simulator's findings: none here)
        self._allocs = 0
        self._accesses: dict[str, dict[str, tuple[bool, bool]]] = {}
        self._timed: list[tuple[dict, Any, Any, float]] = []  # (launch record, start, end, host seconds)
        self._flush: tuple | None = None
        self._origin: dict[int, tuple] = {}  # per GPU: (an event of ours, its ms) the next record is timed from
        self._holding = False  # launches held back behind hold_gpu (in a timed call)
        self.gpus = max(1, min(devices, gpu_count()))
        return Builder(cuda, self.workspace, self.sources)

    def _attributes(self) -> dict:
        """What host code reads of `cuda.get_current_device()`, this GPU's (for the runner's client;
        on the stock simulator, a small GPU's SM count, the client's virtual device's other attributes)."""
        if self.stock:
            return {"MULTIPROCESSOR_COUNT": STOCK_SIMULATOR_SMS}
        try:
            device = self.cuda.get_current_device()
            found = {name: int(getattr(device, name)) for name in REPORTED_ATTRIBUTES}
            found["compute_capability"] = [int(v) for v in device.compute_capability]
        except Exception:  # noqa: BLE001 - the client's virtual device then stands
            return {}
        return {**found, "name": gpu_name()}

    # -- the judge's channel (Device.judge) ---------------------------------------------------
    def _identity(self) -> dict:
        return {"backend": "gpu", "device": gpu_name(), "gpus": gpu_count()}

    def _configure(self, request: dict) -> dict:
        if not self.stock:
            hold_gpu()  # built now (a compilation of ours), not within a student's first timed call
        return {"attributes": self._attributes()}  # (a GPU compiles for real: no compile check)

    def _where_running(self, frame) -> str:
        return ""  # the kernel runs on the GPU: no frame of this process says where

    def _begun(self, request: dict) -> None:
        self._timed = []
        self._holding = bool(request.get("flush"))  # a timed call: each launch's dispatch hidden (hold_gpu)
        if self._holding:
            self._flush_l2()

    def _ended(self) -> tuple[list, bool]:
        """Each launch's time. A kernel's fault (an illegal address, ...) surfaces at the first
        synchronization after it: here, when the call made none. It is a finding of the call,
        never an exception that ends this process (the judge would blame the grader, not the
        kernel)."""
        try:
            self._resolve_times()
        except Exception as exc:  # noqa: BLE001 - whatever CUDA says of the call's kernels
            self._timed = []
            self._finding(type(exc).__name__, str(exc))
        return [], False

    def _flush_l2(self) -> None:
        """A device-to-device copy of twice the L2 cache: no call finds its data there from the last."""
        if self.stock:
            return
        if self._flush is None:
            size = l2_flush_bytes()
            self._flush = (self.cuda.device_array(size, np.uint8), self.cuda.device_array(size, np.uint8))
        self._flush[1].copy_to_device(self._flush[0])
        self.cuda.synchronize()

    def _resolve_times(self) -> None:
        """Each launch's time, from its events (synchronized now, at the call's end)."""
        for record, start, end, host_s in self._timed:
            end.synchronize()
            record["ms"] = float(_event_ms(start.elapsed_time(end), host_s))  # (the stock simulator: no times)
        self._timed = []

    def _finding(self, type_name: str, message: str, record: dict | None = None) -> dict:
        """A failed request (called while its exception is handled), logged for the judge: a CUDA
        error that destroys the context is said in the student's words first, as "context_lost"
        (the judge starts a fresh device process after it)."""
        meaning = sticky_cuda_error(sys.exc_info()[1])
        message = self._relative(f"{meaning} ({message})" if meaning else message)
        finding = {"kind": "context_lost" if meaning else "simulator", "type": type_name, "message": message}
        self.log.add("findings", finding)
        return error_reply(**finding)

    def serving_runner(self) -> bool:
        """Only within a call the judge began: a runner's thread that launches kernels in the
        background waits for the next call of its own (and its kernels are timed in it), never
        running on the GPU while another grade, or the reference, is timed."""
        return self.log.call is not None

    # -- memory -------------------------------------------------------------------------------
    def _current(self, request: dict):
        """`with` the request's device (the runner's current one; one GPU: GPU 0 for every rank)."""
        return self.cuda.gpus[int(request.get("device", 0)) % self.gpus]

    def _register(self, held: Held) -> dict:
        handle = self._keep(held)
        array = held.array
        flags = array.flags  # (numba's: a dict; the stock simulator's: NumPy's flags)
        return {"ok": True, "handle": handle, "shape": list(array.shape), "strides": list(array.strides),
                "dtype": dtypes.describe(np.dtype(array.dtype)), "device": 0, "address": _address(array),
                "c_contiguous": bool(flags["C_CONTIGUOUS"]), "f_contiguous": bool(flags["F_CONTIGUOUS"])}

    def _new_alloc(self) -> _Alloc:
        self._allocs += 1
        return _Alloc(self._allocs)

    def _uploaded(self, data: np.ndarray, into: Held, key=None) -> None:
        upload = self._upload(data)
        alloc = into._alloc.id
        self.kernel_writes[alloc] = None  # what the host wrote is no kernel's work
        whole = key is None and into.array.size == data.size
        self.sources[alloc] = frozenset({upload}) if whole else self.sources.get(alloc, frozenset()) | {upload}

    def _downloaded(self, data: np.ndarray, source: Held, key=None) -> None:
        alloc = source._alloc.id
        self._download(data, self.log.call is not None and self.kernel_writes.get(alloc) == self.log.call,
                       self.sources.get(alloc, ()))

    def op_alloc(self, request: dict) -> dict:
        shape = tuple(int(s) for s in request["shape"])
        dtype = dtypes.parse(request["dtype"])
        order = "F" if request.get("order") == "F" else "C"
        with self._current(request):
            if "data" in request:
                data = _host_array(request["data"], shape, dtype)
                held = Held(self.cuda.to_device(np.asfortranarray(data) if order == "F" else data), self._new_alloc())
                self._slot = "data"
                self._uploaded(data, held)
            else:
                held = Held(self.cuda.device_array(shape, dtype, order=order), self._new_alloc())
                if request.get("initialised"):  # (numba's device_array is not; the protocol's may be)
                    held.array.copy_to_device(np.zeros(shape, dtype, order=order))
        return self._register(held)

    def op_upload(self, request: dict) -> dict:
        held = self._array(request)
        data = np.asarray(request["data"])
        if data.size != held.array.size:
            raise ValueError(f"copy_to_device: {data.shape} does not fit {held.shape}")
        held.array.copy_to_device(data.reshape(held.shape), stream=self._stream(request))
        self._slot = "data"
        self._uploaded(data, held)
        return {"ok": True}

    def op_download(self, request: dict) -> dict:
        held = self._array(request)
        stream = self._stream(request)
        data = held.array.copy_to_host(stream=stream)
        if stream:
            stream.synchronize()
        self._downloaded(data, held)
        return {"ok": True, "data": data}

    def op_copy(self, request: dict) -> dict:
        target, source = self._array(request), self._array(request, "source")
        with self._current(request):
            target.array.copy_to_device(source.array, stream=self._stream(request))
        self._copied(target._alloc.id, source._alloc.id)
        return {"ok": True}

    def op_view(self, request: dict) -> dict:
        held = self._array(request)
        key = _index(request["key"])
        view = held.array[key]
        if not hasattr(view, "copy_to_host"):
            value = np.asarray(view)
            self._downloaded(value, held, key)
            return {"ok": True, "scalar": value[()]}
        return self._register(Held(view, held._alloc))

    def op_setitem(self, request: dict) -> dict:
        held = self._array(request)
        key = _index(request["key"])
        with self._current(request):
            if "source" in request:
                source = self._array(request, "source")
                held.array[key] = source.array
                self.kernel_writes[held._alloc.id] = self.kernel_writes.get(source._alloc.id)
                self.sources[held._alloc.id] = self.sources.get(held._alloc.id, frozenset()) | \
                    self.sources.get(source._alloc.id, frozenset())
                return {"ok": True}
            data = np.asarray(request["data"])
            held.array[key] = data
        self._slot = "data"
        self._uploaded(data, held, key)
        return {"ok": True}

    def op_reshape(self, request: dict) -> dict:
        held = self._array(request)
        order = "F" if request.get("order") == "F" else "C"
        return self._register(Held(held.array.reshape(tuple(int(s) for s in request["shape"]), order=order),
                                   held._alloc))

    def op_transpose(self, request: dict) -> dict:
        held = self._array(request)
        axes = request.get("axes")
        array = held.array.transpose(None if axes is None else tuple(int(a) for a in axes))
        if self.stock or array is held.array:  # (the stock simulator's is a view)
            return self._register(Held(array, held._alloc))
        # numba-cuda's transpose is a copy, by a kernel of its own, into new memory (as op_copy's)
        alloc = self._new_alloc()
        self._copied(alloc.id, held._alloc.id)
        return self._register(Held(array, alloc))

    # -- streams and events -------------------------------------------------------------------
    def _stream(self, request: dict):
        if not request.get("stream"):
            return 0
        stream = self._handle(request, "stream")
        if not isinstance(stream, _Stream):
            raise KeyError("no such stream")
        return stream.stream

    def _event(self, request: dict):
        event = self._handle(request, "event")
        if not isinstance(event, _Event):
            raise KeyError("no such event")
        return event.event

    def op_stream(self, request: dict) -> dict:
        with self._current(request):
            return {"ok": True, "stream": self._keep(_Stream(self.cuda.stream()))}

    def op_name_stream(self, request: dict) -> dict:
        return {"ok": True}  # (names are for the simulator's race messages: no race is found here)

    def op_event(self, request: dict) -> dict:
        with self._current(request):
            return {"ok": True, "event": self._keep(_Event(self.cuda.event()))}

    def op_record(self, request: dict) -> dict:
        """The student's own event: its time on this GPU's clock, from the first event recorded
        here (what the client's `elapsed_time` subtracts). Each record is timed from an event of
        ours recorded beside the last one: a student's event may be recorded again (it would move
        an origin of theirs), and CUDA's milliseconds are a float32 (far from one origin, microseconds
        are lost)."""
        event, stream = self._event(request), self._stream(request)
        gpu = int(request.get("device", 0)) % self.gpus  # (events of two GPUs have no common clock)
        with self._current(request):
            event.record(stream)
            anchor = self.cuda.event()
            anchor.record(stream)  # just after `event`, on its stream: the same time
            anchor.synchronize()
            last = self._origin.get(gpu)
            ms = 0.0 if last is None else last[1] + float(last[0].elapsed_time(event))
            self._origin[gpu] = (anchor, ms)
        return {"ok": True, "ms": max(ms, 0.0)}

    def op_sync(self, request: dict) -> dict:
        if request.get("event"):
            self._event(request).synchronize()
        elif request.get("stream"):
            self._stream(request).synchronize()
        else:
            self.cuda.synchronize()
        return {"ok": True}

    # -- launches -----------------------------------------------------------------------------
    def op_launch(self, request: dict) -> dict:
        package = request["kernel"]
        kernel = self.builder.build(package) if "functions" in package else self.builder.cached(package["id"])
        names = list(self.builder.params(kernel))
        accesses = self._accesses.get(package["id"])
        if accesses is None:
            accesses = self._accesses[package["id"]] = accesses_of(self.builder.definition(package["id"]), names)
        hosts: list = []
        with self._current(request):
            args = []
            for position, spec in enumerate(request["args"]):
                self._slot = ("arg", position)
                args.append(self._arg(spec, hosts))
            grid, block = _dims(request["grid"]), _dims(request["block"])
            stream = self._stream(request)
            plain = [self._plain(a, stream) for a in args]
            start, end = self.cuda.event(), self.cuda.event()
            if self._holding:
                hold_gpu(stream)
            host = time.perf_counter()
            start.record(stream)
            kernel[grid, block, stream, request.get("sharedmem", 0)](*plain)
            end.record(stream)
            host = time.perf_counter() - host
        record = {"kernel": kernel.py_func.__name__, "grid": list(_dim3(grid)), "block": list(_dim3(block)),
                  "shared_bytes": int(request.get("sharedmem", 0) or 0), "device": 0, "executor": "gpu",
                  "fallback_reason": None, "counters": {},
                  "arrays_written": [n for n, a in zip(names, args) if isinstance(a, Held) and accesses[n][1]],
                  "arrays_read": [n for n, a in zip(names, args) if isinstance(a, Held) and accesses[n][0]]}
        self.log.add("launches", record)
        self._timed.append((record, start, end, host))
        origin = {name: self.sources.get(value._alloc.id, frozenset()) if isinstance(value, Held)
                  else frozenset({upload}) for name, value, (_, upload) in zip(names, args, hosts)
                  if isinstance(value, Held) or upload}
        derived = frozenset().union(*(origin.get(n, frozenset()) for n in names if accesses[n][0]),
                                    self._constant_uploads(package["id"]),
                                    self._number_uploads(kernel, package["id"], names, plain, grid))
        back = []
        for name, value, (host_array, _) in zip(names, args, hosts):
            if isinstance(value, Held) and accesses[name][1]:
                self.kernel_writes[value._alloc.id] = self.log.call
                self.sources[value._alloc.id] = derived
            if host_array is not None and isinstance(value, Held):  # numba copies it back
                value.array.copy_to_host(host_array, stream=stream)
                if stream:
                    stream.synchronize()
                back.append(host_array)
                if accesses[name][1]:
                    self._downloaded(host_array, value)
        return {"ok": True, "writeback": back}

    def _host_copy(self, data: np.ndarray) -> Held:
        return Held(self.cuda.to_device(data), self._new_alloc())

    def _plain(self, value, stream):
        """A kernel argument as numba takes it: numba's arrays (in tuples too), and a host array
        (not copied back: a read-only one) already on the device, so that numba's copies to and
        from the device are not timed as the kernel's."""
        if isinstance(value, Held):
            return value.array
        if isinstance(value, tuple):
            return tuple(self._plain(v, stream) for v in value)
        if isinstance(value, np.ndarray):
            return self.cuda.to_device(value, stream=stream)
        return value


class _Stream:
    __slots__ = ("stream",)

    def __init__(self, stream):
        self.stream = stream


class _Event:
    __slots__ = ("event",)

    def __init__(self, event):
        self.event = event


def _address(array) -> int:
    """Where the array's first element is (the runner tells ranks' memory apart by it): the
    device pointer; on numba's stock simulator, its NumPy array's."""
    interface = getattr(type(array), "__cuda_array_interface__", None)
    if interface is not None:
        return int(array.__cuda_array_interface__["data"][0] or 0)
    return int(array._ary.__array_interface__["data"][0])


def accesses_of(definition: ast.FunctionDef | None, names: list[str]) -> dict[str, tuple[bool, bool]]:
    """(read, written) per parameter of a kernel, from its code: `p[...] = v` writes p, `p[...] +=
    v` reads and writes it, `p[...]` elsewhere reads it, `p.shape` (and the like) neither; any
    other use (passed to a device function or an atomic, bound to another name) both. Without
    its definition: every parameter both."""
    if definition is None:
        return {name: (True, True) for name in names}
    found = {name: [False, False] for name in names}
    stored: set[int] = set()  # ids of Subscript nodes that are assignment targets
    augmented: set[int] = set()
    for node in ast.walk(definition):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for inner in ast.walk(target):
                if isinstance(inner, ast.Subscript):
                    stored.add(id(inner))
                    if isinstance(node, ast.AugAssign):
                        augmented.add(id(inner))
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(definition):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    for node in ast.walk(definition):
        if not (isinstance(node, ast.Name) and node.id in found):
            continue
        parent = parents.get(id(node))
        access = found[node.id]
        if isinstance(parent, ast.Subscript) and parent.value is node:
            if id(parent) in stored:
                access[1] = True
                if id(parent) in augmented:
                    access[0] = True
            else:
                access[0] = True
        elif isinstance(parent, ast.Attribute) and parent.attr in _SHAPE_ATTRIBUTES:
            continue
        elif isinstance(parent, ast.arguments) or isinstance(node.ctx, ast.Store):
            continue
        else:
            access[0] = access[1] = True
    return {name: (read, written) for name, (read, written) in found.items()}


__all__ = ["GpuDevice", "Held", "accesses_of"]
