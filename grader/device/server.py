"""The device process: the simulated GPU as a process of its own, as a real GPU is a device of its own.

`python -m grader.device` serves two channels from one loop, one message at a time:
- the runner's (a socket): device memory, copies, views and launches asked for by the student's
  host code (grader.device.client). Arrays arrive and leave as raw frames, large ones as sealed
  shared memory (grader.wire.shared), never pickles.
- the judge's (a pipe pair, the runner protocol's framing): `configure`, `ping`, and `begin` /
  `end` around each call the judge makes into the runner. `end` answers with what happened on
  the device during that call: every launch's record and counters, every finding (race, out of
  bounds, compile error, ...), and the data flow: a digest of each upload, and of each download
  with whether a kernel of this call wrote the memory it came from.
The runner never sees those reports and cannot change them: device memory, counters and
checkers live here. Kernels arrive as data (grader.device.package) and the student's module is
never imported here. The process is confined by a sandbox of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import sys
import traceback
from typing import Any

import numpy as np

from .. import wire
from ..errors import StudentCodeError
from ..wire import dtypes, shared
from ..wire.messages import MAX_ANSWER_SHAPES, digest, error_reply, is_number
from ..sim.host import SimEvent, SimStream
from ..sim.sites import STACK_FRAMES, launch_site, reported_site
from . import replay
from .host_bytes import HostBytes, is_neutral
from .kernel_output import KernelOutput
from .package import Builder, NotPackable
from .watch import AFTER, IDLE, Watch

RUNNER_BOUNDS = wire.Bounds(json_bytes=16 << 20, frame_bytes=2 << 30)
JUDGE_BOUNDS = wire.Bounds(json_bytes=1 << 20, frame_bytes=1 << 30)  # (a replay's substitutions)
HEAD = 16  # values of each download the judge sees (a returned scalar is one of them)
MAX_RECORDS = 10_000  # uploads, downloads, launches, findings per call
MAX_STREAM_NAME = 100  # what the runner calls one of its streams (r.stream of rank 2): words in messages
KEPT_BYTES = 64 << 20  # kernel-written downloads of a call kept to the call's end (for `CallLog.blocks`)
MAX_BLOCKS = 2 * MAX_ANSWER_SHAPES  # of a download: per answer, a block as it is and one of its transpose
_RECORDED = {"uploads": "copies to the GPU", "downloads": "copies from the GPU", "launches": "kernel launches"}


def _converts(source: np.dtype, target: np.dtype) -> bool:
    """Whether the host may have converted a download of `source` to an answer of `target`:
    numbers to numbers (no complex to real)."""
    return source.kind in "biuf" and target.kind in "biuf" or source.kind == target.kind == "c"


class CallLog:
    def __init__(self, call: int | None):
        self.call = call
        self.launches: list[dict] = []
        self.findings: list[dict] = []
        self.uploads: list[dict] = []
        self.downloads: list[dict] = []
        # (download entry, its data, its elements still the host's bytes or None), KEPT_BYTES at most
        self.kept: list[tuple[dict, np.ndarray, np.ndarray | None]] = []
        self._kept_bytes = 0
        self.printed = KernelOutput()  # what the call's kernels print, for the student's feedback

    def keep(self, entry: dict, data: np.ndarray, carried: np.ndarray | None) -> None:
        """Keep a kernel-written download's data to the call's end, while KEPT_BYTES last."""
        if data.ndim and self._kept_bytes + data.nbytes <= KEPT_BYTES:
            self.kept.append((entry, data, carried))
            self._kept_bytes += data.nbytes

    def blocks(self, answers: list[tuple[tuple[int, ...], np.dtype]]) -> None:
        """Each kept download that holds an answer's shape other than whole (as many axes, none
        shorter: a padded output copied back, the answer sliced from it on the host), in another
        dtype (computed in float64, converted on the host) or transposed (a matrix product
        computed as its transpose, `.T` on the host) gets the digest of what the host would make
        of it: its leading block of that shape, in that dtype (grader.judge.dataflow), and how
        many of the block's elements are still bytes the host wrote."""
        for entry, data, carried in self.kept:
            held = None if carried is None else carried.reshape(data.shape)
            views = [(data, held, False)]
            if data.ndim == 2 and 1 not in data.shape:
                views.append((data.T, None if held is None else held.T, True))
            found = []
            for shape, dtype in answers:
                for view, view_held, transposed in views:
                    whole = view.size == int(np.prod(shape, dtype=np.int64))  # digests ignore shapes
                    if not transposed and whole and dtype == view.dtype or not _converts(view.dtype, dtype):
                        continue  # the whole in its own dtype: the download's own digest says it
                    if whole and not transposed:
                        block = ...
                    elif len(shape) == view.ndim and all(d <= e for d, e in zip(shape, view.shape)):
                        block = tuple(slice(0, d) for d in shape)
                    else:
                        continue
                    part = None if view_held is None else view_held[block].reshape(-1)
                    found.append({"shape": list(shape), "digest": digest(view[block].astype(dtype, copy=False)),
                                  **_carried_fields(part)})
            if found:
                entry["blocks"] = found[:MAX_BLOCKS]

    def add(self, kind: str, entry: dict) -> None:
        entries = getattr(self, kind)
        if len(entries) < MAX_RECORDS:
            entries.append(entry)
        elif kind != "findings" and len(entries) == MAX_RECORDS:
            # what is not recorded cannot be checked (a host answer uploaded after 10000 decoys):
            # the call fails, once per kind
            entries.append(None)
            self.findings.append({"kind": "simulator", "type": "NotSimulatedError", "message": (
                f"this call made more than {MAX_RECORDS} {_RECORDED[kind]}: the simulated GPU stops recording "
                f"there, so the call cannot be graded (copy whole arrays, launch fewer kernels)")})

    def report(self, timeline: list, truncated: bool) -> dict:
        return {"ok": True, "call": self.call, "launches": self.launches[:MAX_RECORDS],
                "findings": self.findings, "uploads": self.uploads[:MAX_RECORDS],
                "downloads": self.downloads[:MAX_RECORDS], "timeline": timeline,
                "timeline_truncated": truncated, **self.printed.report()}


class Device:
    def __init__(self, devices: int, workspace: str, sources: dict[str, str] | None = None):
        """`sources`: the judge's digests of the workspace's files (Builder), None to take any text."""
        self.workspace = workspace.rstrip("/") + "/"
        self.sources = sources
        self.builder = self._open(devices)
        self.handles: dict[int, Any] = {}  # device arrays, streams and events the runner holds
        self._next = 1
        self.kernel_writes: dict[int, int | None] = {}  # allocation id -> call whose kernel last wrote it
        self.sources: dict[int, frozenset[int]] = {}  # allocation id -> the uploads its contents came from
        self._uploads = 0
        self._constant_ids: dict[tuple, int] = {}  # (kernel package, array): its upload in this call
        self._number_ids: dict[tuple, int] = {}  # (dtype, bytes): the upload of a number kernels were given
        self.log = CallLog(None)
        self.script: replay.Script | None = None  # the call's requests, while it lasts
        self.last_script: replay.Script | None = None  # the last call's, to its replay
        self._replay: replay.Replaying | None = None  # a replay in progress
        self._index: int | None = None  # the request being served, in its call's script
        self.watch = Watch(self._where_running)  # where a kernel is when its call runs out of time
        self._slot = None  # where in that request the data of the next upload is

    def _open(self, devices: int) -> Builder:
        """The device's memory and launches (here the simulator's); the builder of its kernels."""
        from .. import sim

        sim.tune_process()  # this process is the simulated GPU's own
        self.sim = sim.install(devices=devices, compile_check=True)
        # (imported now: the watch's thread gets the interpreter's lock between a kernel's bytecodes
        # only, and an import's file reads would each wait for it again)
        from ..sim.watch import where_running as kernel_at

        self._kernel_at = kernel_at
        self._trace = sim.trace
        self._errors = sim.SimError
        self.host_bytes = HostBytes()  # what the host wrote, element by element
        import numba.cuda

        return Builder(numba.cuda, self.workspace, self.sources)

    # -- the judge's channel ------------------------------------------------------------------
    def judge(self, request: dict) -> dict:
        op = request.get("op")
        if op == "ping":
            return {"ok": True, **self._identity()}
        if op == "configure":
            return {"ok": True, **self._configure(request)}
        if op == "begin":
            self.log = CallLog(int(request["call"]))
            self._constant_ids, self._number_ids = {}, {}
            self._begun(request)
            watch_s = request.get("watch_s")
            if isinstance(watch_s, (int, float)) and not isinstance(watch_s, bool) and 0 < watch_s < 1e6:
                self.watch.arm(self.log.call, float(watch_s))
            return {"ok": True}
        if op == "end":
            self.watch.cancel()
            timeline = self._ended()  # (while the call's log is the current one: its findings go there)
            log, self.log = self.log, CallLog(None)
            if log.call != request.get("call"):
                return _protocol_error("end of a call that did not begin")
            try:
                answers = [(tuple(int(d) for d in a["shape"]), dtypes.parse(a["dtype"]))
                           for a in request.get("answers", [])[:MAX_ANSWER_SHAPES]]
            except (TypeError, ValueError, KeyError, wire.ProtocolError) as exc:
                return _protocol_error(f"end: answers: {exc}")
            log.blocks(answers)
            return log.report(*timeline)
        if op == "replay":
            return self._replay_call(request)
        return _protocol_error(f"unknown op {op!r}")

    # what the two devices (this simulated one, grader.device.gpu_server's) do differently there
    def _identity(self) -> dict:
        return {"backend": "sim"}

    def _configure(self, request: dict) -> dict:
        self.sim.compile_check = bool(request.get("compile_check", True))
        return {}

    def _where_running(self, frame) -> str:
        """Where the kernel this process runs now is (the serving thread's `frame`), or, where none
        runs, IDLE and how many the call launched (a host loop launching kernels without end)."""
        where, launched = self._kernel_at(frame, self.workspace), len(self.log.launches)
        return f"{where}{AFTER}{launched}" if where else f"{IDLE}, {launched} launched in this call"

    def _begun(self, request: dict) -> None:
        self.script, self.last_script = replay.Script(self.log.call), None
        self.sim.streams.take_log()  # the call's stream order starts here

    def _ended(self) -> tuple[list, bool]:
        """At a call's end: its timeline, and whether it was cut."""
        self.last_script, self.script = self.script, None
        log, truncated = self.sim.streams.take_log()
        for op in log:  # where each was issued, as the student's files are named in every message
            if "site" in op:
                op["site"] = self._relative(op["site"])
        return log, truncated

    def _replay_call(self, request: dict) -> dict:
        """The last call's requests again, with other data for some uploads (grader.device.replay)."""
        script = self.last_script
        if script is None or request.get("call") != script.call:
            return _protocol_error("replay of a call that is not the last one")
        try:
            substitutions = {int(s["upload"]): np.asarray(s["data"]) for s in request.get("substitutions", [])}
            wanted = [int(i) for i in request.get("downloads", [])]
            originals = frozenset(int(i) for i in request.get("originals", []))
        except (TypeError, ValueError, KeyError) as exc:
            return _protocol_error(f"replay: {exc}")
        return replay.run(self, script, substitutions, wanted, originals)

    @contextlib.contextmanager
    def replaying(self, state: "replay.Replaying"):
        """Ops served for a replay: logged apart (the call's report was sent), kernels as the
        call launched them, stream order and per-call numbering restored after."""
        saved = self.log, self._constant_ids, self._number_ids
        allocations = set(self.kernel_writes), set(self.sources)
        self.log, self._constant_ids, self._number_ids = CallLog(-1), {}, {}
        self._replay = state
        try:
            yield
        finally:
            self._replay = None
            self.log, self._constant_ids, self._number_ids = saved
            self.sim.streams.take_log()
            for key in set(self.kernel_writes) - allocations[0]:
                del self.kernel_writes[key]
            for key in set(self.sources) - allocations[1]:
                del self.sources[key]

    # -- the runner's channel -----------------------------------------------------------------
    def serving_runner(self) -> bool:
        """Whether the runner's requests are read now (the simulator: always; its module's import
        makes requests outside any call)."""
        return True

    def runner(self, request: dict) -> dict:
        for handle in request.get("free") or ():
            self.handles.pop(int(handle), None)
        script = self.script if self._replay is None else None
        index = None
        if script is not None:
            index = self._index = script.record(request, self.handles)
        elif self._replay is not None:
            self._index = self._replay.index
        try:
            reply = self._serve(request)
        finally:
            self._index = self._slot = None
        if script is not None:
            script.replied(index, reply)
        return reply

    def _serve(self, request: dict) -> dict:
        op = request.get("op")
        method = getattr(self, f"op_{op}", None) if isinstance(op, str) else None
        if method is None:
            return _protocol_error(f"unknown device op {op!r}")
        try:
            with reported_site(_site(request), _stack(request)):
                return method(request)
        except self._errors as exc:
            record = exc.record(self._relative)
            return self._finding(type(exc).__name__, record["message"], record)
        except NotPackable as exc:
            return self._finding("NotSimulatedError", str(exc))
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            where = self._student_frame(exc.__traceback__)
            return error_reply("exception", type(exc).__name__, self._relative(str(exc)), where=where)
        except Exception as exc:  # noqa: BLE001 - numba's own errors (typing) and anything else: the launch failed
            return self._finding(type(exc).__name__, self._raised(exc))

    def _student_frame(self, tb) -> str:
        """file:line in function of the innermost frame in the student's files (a kernel's or
        device function's source, compiled here from its package), "" if none."""
        where = ""
        for frame, lineno in traceback.walk_tb(tb):
            filename = frame.f_code.co_filename
            if filename.startswith(self.workspace):
                where = f"{self._relative(filename)}:{lineno} in {frame.f_code.co_name}"
        return where

    def _raised(self, exc: Exception) -> str:
        """What a kernel raised: the stub's `raise NotImplementedError()` left in a kernel in the
        words the runner gives host code's ("not implemented yet (file:line in kernel)")."""
        where = self._student_frame(exc.__traceback__)
        text = str(exc).strip()
        if type(exc) is NotImplementedError:
            return StudentCodeError("not_implemented", "NotImplementedError", text, where).summary()
        if where:
            return f"{type(exc).__name__} raised at {where}" + (f": {text}" if text else "")
        return text or type(exc).__name__

    def _finding(self, type_name: str, message: str, record: dict | None = None) -> dict:
        """A failed request that is a finding: logged for the judge, and the runner's error."""
        finding = {"kind": "simulator", "type": type_name, "message": self._relative(message)}
        if record is not None:
            finding["finding"] = dict(record, message=finding["message"])
        self.log.add("findings", finding)
        return error_reply(**finding)

    def _relative(self, text: str) -> str:
        return text.replace(self.workspace, "")

    @staticmethod
    def _error(kind: str, message: str) -> dict:
        return error_reply("exception", kind, message)

    def _array(self, request: dict, key: str = "handle"):
        found = self._handle(request, key)
        if not hasattr(found, "_alloc"):
            raise KeyError("no such device array (freed, or never allocated)")
        return found

    def _handle(self, request: dict, key: str):
        try:
            return self.handles[int(request[key])]
        except (KeyError, TypeError, ValueError):
            raise KeyError(f"no such {key} (freed, or never made)") from None

    def _stream(self, request: dict):
        """The request's stream: a stream the runner made, or 0 (the default stream)."""
        if not request.get("stream"):
            return 0
        stream = self._handle(request, "stream")
        if not isinstance(stream, SimStream):
            raise KeyError("no such stream")
        return stream

    def _event(self, request: dict):
        event = self._handle(request, "event")
        if not isinstance(event, SimEvent):
            raise KeyError("no such event")
        return event

    def _current(self, request: dict):
        """`with` the device the runner's host thread had current (a copy's default stream is its)."""
        return self.sim.gpus[int(request.get("device", 0))]

    def _keep(self, thing) -> int:
        handle = self._next
        self._next += 1
        self.handles[handle] = thing
        return handle

    def _register(self, array) -> dict:
        handle = self._keep(array)
        view = array._view
        return {"ok": True, "handle": handle, "shape": list(array.shape), "strides": list(array.strides),
                "dtype": dtypes.describe(array.dtype), "device": array.device_id,
                "address": array._alloc.address + array.offset * array.dtype.itemsize,
                "c_contiguous": bool(view.flags.c_contiguous), "f_contiguous": bool(view.flags.f_contiguous)}

    def _upload(self, data: np.ndarray, what: str | None = None) -> int:
        """Log an upload; its number (what the memory it fills is computed from). `what`: how
        the judge names it (default: where the student's host code copied it)."""
        self._uploads += 1
        key = digest(data)
        slot, self._slot = self._slot, None
        if slot is not None and self.script is not None and self._replay is None and self._index is not None:
            self.script.uploaded(self._uploads, self._index, slot, key)
        if what is None:
            site = launch_site()
            what = self._relative(f"the array copied to the GPU at {site[0]}:{site[1]}" if site
                                  else "an array copied to the GPU")
        self.log.add("uploads", {"digest": key, "nbytes": int(data.nbytes), "id": self._uploads,
                                 "neutral": is_neutral(data), "what": what, "shape": list(np.shape(data)),
                                 "head": np.ascontiguousarray(data).reshape(-1)[:HEAD].copy()})
        return self._uploads

    def _uploaded(self, data: np.ndarray, into, key=None) -> None:
        """The host wrote `into` (or `into[key]`) with `data`."""
        upload = self._upload(data)
        alloc = into._alloc.id
        self.kernel_writes[alloc] = None  # what the host wrote is no kernel's work
        self.host_bytes.host_wrote(into, upload, key)
        if key is None and into.size == into._alloc.store.size:
            self.sources[alloc] = frozenset({upload})
            return
        self.sources[alloc] = self.sources.get(alloc, frozenset()) | {upload}
        whole = self.host_bytes.assembled(into)
        if whole is not None:  # an array uploaded in pieces (chunks on streams): one upload again
            upload = self._upload(whole, "an array copied to the GPU in pieces")
            self.sources[alloc] = frozenset({upload})
            pieces = self.host_bytes.pieces(into)
            if self.script is not None and self._replay is None and pieces is not None:
                self.script.assembled[upload] = pieces

    def _download(self, data: np.ndarray, kernel_written: bool, sources, carried=(None, ())) -> None:
        """`carried`: (which of its elements are still bytes the host wrote, or None; the
        uploads that wrote them), as `HostBytes.carried` says."""
        flat = np.ascontiguousarray(data).reshape(-1)
        held, uploads = carried
        entry = {"digest": digest(data), "nbytes": int(data.nbytes),
                 "kernel_written": kernel_written, "sources": sorted(sources),
                 "head": flat[:HEAD].copy(), **_carried_fields(held),
                 "carried_from": list(uploads), "shape": list(np.shape(data))}
        if kernel_written and flat.size > 1 and flat.dtype.kind in "biuf":
            with np.errstate(all="ignore"):
                total = float(np.sum(flat, dtype=np.float64))  # (partial sums the host added up?)
            if np.isfinite(total):
                entry["total"] = total
        self.log.add("downloads", entry)
        if self._replay is not None:
            self._replay.downloads.append(data)
        elif self.script is not None:
            self.script.downloaded(data, kernel_written, entry["digest"])
        if kernel_written:  # the runner gets its own copy of the data; this one stays unchanged
            self.log.keep(entry, data, held)

    def _downloaded(self, data: np.ndarray, source, key=None) -> None:
        alloc = source._alloc.id
        self._download(data, self.log.call is not None and self.kernel_writes.get(alloc) == self.log.call,
                       self.sources.get(alloc, ()), self.host_bytes.carried(source, key))

    def op_alloc(self, request: dict) -> dict:
        host = self.sim.host
        shape = [int(s) for s in request["shape"]]
        with self.sim.gpus[int(request.get("device", 0))]:
            array = host._new(shape, dtypes.parse(request["dtype"]), bool(request.get("initialised")),
                              "F" if request.get("order") == "F" else "C")
        self.host_bytes.allocated(array)
        if "data" in request:
            data = _host_array(request["data"], array.shape, array.dtype)
            array.copy_to_device(data)
            self._slot = "data"
            self._uploaded(data, array)
        return self._register(array)

    def op_upload(self, request: dict) -> dict:
        array = self._array(request)
        data = np.asarray(request["data"])
        array.copy_to_device(data, stream=self._stream(request))  # refuses data that does not fit
        self._slot = "data"
        self._uploaded(data, array)
        return {"ok": True}

    def op_download(self, request: dict) -> dict:
        array = self._array(request)
        data = array.copy_to_host(stream=self._stream(request))
        self._downloaded(data, array)
        return {"ok": True, "data": data}

    def op_copy(self, request: dict) -> dict:
        target, source = self._array(request), self._array(request, "source")
        with self._current(request):
            target.copy_to_device(source, stream=self._stream(request))
        self.host_bytes.device_copied(target, source)
        self._copied(target._alloc.id, source._alloc.id)
        return {"ok": True}

    def _copied(self, target: int, source: int) -> None:
        """Allocation `target` now holds a device-to-device copy of allocation `source`: its data
        flow (the call whose kernels wrote it, the uploads it was computed from) is the source's."""
        self.kernel_writes[target] = self.kernel_writes.get(source)
        self.sources[target] = self.sources.get(source, frozenset())

    def op_view(self, request: dict) -> dict:
        array = self._array(request)
        key = _index(request["key"])
        view = array[key]
        if not hasattr(view, "_alloc"):
            value = np.asarray(view)
            self._downloaded(value, array, key)
            return {"ok": True, "scalar": value[()]}
        return self._register(view)

    def op_setitem(self, request: dict) -> dict:
        array = self._array(request)
        if "source" in request:  # a[...] = b of two device arrays: on the device, as numba does
            source = self._array(request, "source")
            key = _index(request["key"])
            with self._current(request):
                array[key] = source
            self.host_bytes.device_copied(array, source, key)
            self.kernel_writes[array._alloc.id] = self.kernel_writes.get(source._alloc.id)
            self.sources[array._alloc.id] = self.sources.get(array._alloc.id, frozenset()) | \
                self.sources.get(source._alloc.id, frozenset())
            return {"ok": True}
        data = np.asarray(request["data"])
        key = _index(request["key"])
        with self._current(request):
            array[key] = data
        self._slot = "data"
        self._uploaded(data, array, key)
        return {"ok": True}

    # -- streams and events (what they order is the simulator's StreamOrder) ---------------------
    def op_stream(self, request: dict) -> dict:
        with self._current(request):
            return {"ok": True, "stream": self._keep(self.sim.host.stream())}

    def op_name_stream(self, request: dict) -> dict:
        """What messages call a stream the runner made for the student (r.stream): words only."""
        name = request.get("name")
        if not isinstance(name, str):
            return _protocol_error("name_stream: expected a name")
        self.sim.streams.name_stream(self._stream(request).id, name[:MAX_STREAM_NAME])
        return {"ok": True}

    def op_event(self, request: dict) -> dict:
        with self._current(request):
            return {"ok": True, "event": self._keep(self.sim.host.event())}

    def op_record(self, request: dict) -> dict:
        event = self._event(request)
        with self._current(request):
            event.record(self._stream(request))
        return {"ok": True, "ms": float(event.time_ms or 0.0)}

    def op_wait(self, request: dict) -> dict:
        event = self._event(request)
        with self._current(request):
            event.wait(self._stream(request))
        return {"ok": True}

    def op_sync(self, request: dict) -> dict:
        """The host waits: for an event, a stream, the current device, or every device."""
        if request.get("event"):
            self._event(request).synchronize()
        elif request.get("stream"):
            self._stream(request).synchronize()
        elif request.get("all"):
            self.sim.streams.sync_device(None)
        else:
            with self._current(request):
                self.sim.host.synchronize()
        return {"ok": True}

    def op_reshape(self, request: dict) -> dict:
        return self._register(self._array(request).reshape(tuple(int(s) for s in request["shape"]),
                                                           order="F" if request.get("order") == "F" else "C"))

    def op_transpose(self, request: dict) -> dict:
        source, axes = self._array(request), request.get("axes")
        copy = source.transpose(None if axes is None else tuple(int(a) for a in axes))
        if copy is not source:  # numba-cuda's transpose: a copy into new memory (as op_copy's)
            self.host_bytes.allocated(copy)
            self.host_bytes.device_copied(copy, source.transposed_view())
            self._copied(copy._alloc.id, source._alloc.id)
        return self._register(copy)

    def op_launch(self, request: dict) -> dict:
        package = request["kernel"]
        if self._replay is not None:  # the kernel the call launched, whatever has been sent since
            kernel = self._replay.kernel()
        else:
            kernel = self.builder.build(package) if "functions" in package else self.builder.cached(package["id"])
            if self.script is not None and self._index is not None and self._index >= 0:
                self.script.kernels[self._index] = kernel
        hosts: list = []
        gpu = self.sim.gpus[int(request.get("device", 0))]
        args = []
        with gpu:  # (a host array's copy is made on the launch's device)
            for position, spec in enumerate(request["args"]):
                self._slot = ("arg", position)  # (for a host array: where a replay puts another input)
                args.append(self._arg(spec, hosts))
        grid, block = _dims(request["grid"]), _dims(request["block"])
        with self._trace() as launches, gpu, self.log.printed.capture():
            kernel[grid, block, self._stream(request), request.get("sharedmem", 0)](*args)
        written, read = set(), set()
        for record in launches:
            self.log.add("launches", record.summary())
            written.update(record.arrays_written)
            read.update(record.arrays_read)
        names = list(self.builder.params(kernel))
        origin = {}  # parameter -> the uploads its contents came from
        for name, value, (host, upload) in zip(names, args, hosts):
            if hasattr(value, "_alloc"):
                origin[name] = self.sources.get(value._alloc.id, frozenset())
            elif host is not None:
                origin[name] = frozenset({upload})
        # what a kernel writes is computed from what it read, its constant arrays included
        derived = frozenset().union(*(origin.get(name, frozenset()) for name in read),
                                    self._constant_uploads(package["id"]),
                                    self._number_uploads(kernel, package["id"], names, args, grid))
        for name, value in zip(names, args):
            if name in written and hasattr(value, "_alloc"):
                self.kernel_writes[value._alloc.id] = self.log.call
                self.sources[value._alloc.id] = derived
        back = []
        for name, value, (host, _) in zip(names, args, hosts):
            if host is not None and hasattr(value, "_alloc"):  # numba copies it back
                with gpu:
                    value.copy_to_host(host)
                back.append(host)
                if name in written:  # a download of what the kernel wrote
                    self._downloaded(host, value)
        return {"ok": True, "writeback": back}

    def _host_copy(self, data: np.ndarray):
        """Device memory holding a host array a kernel is given (copied back after the launch)."""
        array = self.sim.host.to_device(data)
        self.host_bytes.allocated(array)
        return array

    def _constant_uploads(self, package_id: str) -> frozenset[int]:
        """The kernel's constant arrays, each logged once per call as an upload (data the host
        made that the kernel reads)."""
        ids = []
        for function, name, array in self.builder.constants(package_id):
            key = (package_id, function, name)
            if key not in self._constant_ids:
                self._constant_ids[key] = self._upload(
                    array, f"the array {name!r} that {function!r} takes as a constant (a global or closure "
                           f"array numba copies into the kernel)")
            ids.append(self._constant_ids[key])
        return frozenset(ids)

    def _number_uploads(self, kernel, package_id: str, names: list[str], args: list, grid) -> frozenset[int]:
        """The numbers the kernel was given, as arguments, as constants (globals and closure
        variables numba freezes into the code) or as its grid's dimensions (which it reads as
        `cuda.gridDim`), that could carry an answer (a sum the host computed, passed in and
        written out): each logged once per call as an upload of one value. Start values (0, 1,
        -1, infinities, NaN) are not; which others are the call's own or structural (sizes,
        offsets, masks) the judge decides (grader.judge.dataflow)."""
        kernel_name = kernel.py_func.__name__
        given = [(value, f"passed to kernel {kernel_name!r} as its argument {name!r}")
                 for name, arg in zip(names, args) for value in _numbers(arg)]
        dims = grid if isinstance(grid, tuple) else (grid,)
        given += [(np.int64(value), f"given to kernel {kernel_name!r} as its grid's {axis} dimension (which it "
                                    f"reads as cuda.gridDim.{axis})")
                  for axis, value in zip("xyz", dims) if is_number(value)]
        given += [(value, f"that {function!r} takes as the constant {name!r} (a global or closure variable "
                          f"numba freezes into the kernel)")
                  for function, name, value in self.builder.numbers(package_id)]
        ids = []
        for value, how in given:
            data = np.asarray(value)
            if is_neutral(data):
                continue
            key = (data.dtype.str, data.tobytes())
            if key not in self._number_ids:
                site = launch_site()
                where = self._relative(f", launched at {site[0]}:{site[1]}") if site else ""
                text = np.format_float_positional(data[()], trim="-") if data.dtype.kind == "f" else str(data[()])
                self._number_ids[key] = self._upload(data, f"the number {text} {how}{where}")
            ids.append(self._number_ids[key])
        return frozenset(ids)

    def _arg(self, spec, hosts: list):
        if "host" not in spec:
            self._slot = None
        if "handle" in spec:
            hosts.append((None, 0))
            return self._array(spec)
        if "host" in spec:
            data = np.asarray(spec["host"])
            if spec.get("order") == "F":
                data = np.asfortranarray(data)
            if not spec.get("writeback"):  # numba copies it to the device for the launch alone
                hosts.append((data, self._upload(data)))
                return data
            # numba copies it to the device and back after the launch: done here, so that the
            # copy is followed as any upload is (which of its elements a kernel stored to)
            array = self._host_copy(data)
            self._uploaded(data, array)
            hosts.append((data, 0))
            return array
        hosts.append((None, 0))
        if "tuple" in spec:
            return tuple(self._arg(v, []) for v in spec["tuple"])
        if "complex" in spec:
            return complex(*spec["complex"])
        return spec["value"]


def _numbers(arg) -> list:
    """The numbers in a kernel argument (a tuple's too), bools aside."""
    if isinstance(arg, tuple):
        return [v for item in arg for v in _numbers(item)]
    if is_number(arg):
        return [arg]
    return []


def _carried_fields(held: np.ndarray | None) -> dict:
    """How many elements of a download (or of its block) are still the host's bytes, and the
    first of them (C order), for the message that names it."""
    count = 0 if held is None else int(np.count_nonzero(held))
    return {"carried": count, "carried_first": int(np.argmax(held)) if count else -1}


def _protocol_error(message: str) -> dict:
    return error_reply("protocol", "ProtocolError", message)


def _host_array(data, shape, dtype) -> np.ndarray:
    data = np.asarray(data)
    if data.dtype != dtype or data.size != int(np.prod(shape, dtype=np.int64)):
        raise ValueError(f"data of {data.dtype}{list(data.shape)} for an array of {dtype}{list(shape)}")
    return data.reshape(shape)


def _index(key: list):
    items = []
    for item in key:
        if isinstance(item, dict) and "slice" in item:
            items.append(slice(*item["slice"]))
        elif isinstance(item, dict) and item.get("ellipsis"):
            items.append(Ellipsis)
        elif isinstance(item, dict) and item.get("newaxis"):
            items.append(None)
        elif isinstance(item, int) and not isinstance(item, bool):
            items.append(item)
        else:
            raise TypeError("an index of a device array must be ints and slices")
    return tuple(items)


def _dims(value):
    if isinstance(value, list):
        return tuple(value)
    return value


def serve(device: Device, judge_in, judge_out, runner_sock: socket.socket) -> None:
    judge_fd, runner_fd = judge_in.fileno(), runner_sock.fileno()
    watched = [judge_fd, runner_fd]
    while watched:
        listening = [fd for fd in watched if fd == judge_fd or device.serving_runner()]
        ready, _, _ = select.select(listening, [], [])
        if judge_fd in ready:  # the judge first: an `end` is never delayed by the runner's traffic
            try:
                request = wire.receive(judge_in, JUDGE_BOUNDS)
            except EOFError:
                return  # the judge is gone: so is the device
            wire.send(judge_out, device.judge(request) if isinstance(request, dict) else
                      _protocol_error("not a request"))
            continue
        if runner_fd in ready:
            try:
                request = shared.receive(runner_sock, RUNNER_BOUNDS)
            except (EOFError, OSError):
                watched.remove(runner_fd)  # the runner is gone; the judge may still ask for its report
                continue
            except wire.ProtocolError as exc:
                # a runner that breaks the protocol is not listened to again, and told so at once:
                # its next request ends, not its call's time limit
                watched.remove(runner_fd)
                with contextlib.suppress(OSError):
                    runner_sock.shutdown(socket.SHUT_RDWR)
                device.log.add("findings", {"kind": "protocol", "type": "ProtocolError", "message": str(exc)})
                continue
            reply = device.runner(request) if isinstance(request, dict) else _protocol_error("not a request")
            try:
                shared.send(runner_sock, reply)
            except OSError:
                watched.remove(runner_fd)


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m grader.device")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--in-fd", type=int, required=True, help="the judge's requests")
    parser.add_argument("--out-fd", type=int, required=True, help="replies to the judge")
    parser.add_argument("--runner-fd", type=int, help="a socket connected to the runner")
    parser.add_argument("--listen-fd", type=int, help="a listening socket: the runner connects once")
    parser.add_argument("--workspace", help="this process's own (empty) workspace")
    parser.add_argument("--runner-workspace", default="/workspace", help="the runner's workspace (for messages)")
    parser.add_argument("--sources", type=json.loads, help="the judge's digests of the workspace's files, "
                                                          "by name (JSON): the only texts kernels are built from")
    parser.add_argument("--gpu", action="store_true", help="device memory and launches on the machine's GPU "
                                                           "(grader.device.gpu_server), not the simulator")
    args = parser.parse_args(argv)
    judge_in, judge_out = os.fdopen(args.in_fd, "rb", buffering=0), os.fdopen(args.out_fd, "wb", buffering=0)
    try:
        if args.gpu:
            from .gpu_server import GpuDevice

            device = GpuDevice(args.devices, args.runner_workspace, args.sources)
        else:
            device = Device(args.devices, args.runner_workspace, args.sources)
    except Exception:  # noqa: BLE001 - say why on stderr, for the judge's output tail
        traceback.print_exc()
        sys.exit(3)
    if args.runner_fd is not None:
        runner = socket.socket(fileno=args.runner_fd)
    else:
        listener = socket.socket(fileno=args.listen_fd)
        runner, _ = listener.accept()
        listener.close()
    serve(device, judge_in, judge_out, runner)


def _stack(request: dict) -> list[tuple[str, int, str]] | None:
    """The student's frames the runner says made this request ([file, line, function], innermost
    first; None: none said), for messages only, as `_site`."""
    stack = request.get("stack")
    frames = [f for f in stack[:STACK_FRAMES] if isinstance(f, list) and len(f) == 3 and isinstance(f[0], str)
              and isinstance(f[1], int) and not isinstance(f[1], bool) and isinstance(f[2], str)] \
        if isinstance(stack, list) else []
    return [(file[:1000], line, function[:200]) for file, line, function in frames] or None


def _site(request: dict) -> tuple[str, int] | None:
    """Where the runner says the student's code made this request: [file, line], for messages only
    (a lying runner only misleads its own student)."""
    site = request.get("site")
    if isinstance(site, list) and len(site) == 2 and isinstance(site[0], str) and isinstance(site[1], int) \
            and not isinstance(site[1], bool):
        return site[0][:1000], site[1]
    return None
