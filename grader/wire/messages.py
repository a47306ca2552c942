"""The typed replies a runner sends, checked on receipt: one dataclass per reply, `parse` per class.

The judge believes none of it: every field is checked for its type, strings are capped, lists are
bounded, numbers must be finite, and a launch's counters must be consistent (a request touches at
least one and at most 32 sectors or wavefronts, and serves at least one access). A reply that
fails is a `ProtocolError` naming the field, never a half-believed answer. Requests the judge
sends are plain dictionaries it builds itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .digests import digest  # noqa: F401 (the wire's digest, named here as before)
from .frames import ProtocolError

MAX_MESSAGE = 2000       # an error's first line, a warning
MAX_TEXT = 8000          # an error's detail, a traceback
MAX_NAME = 200           # kernel, array and exception names
MAX_SITE = 600           # where the student's code issued an operation (three frames)
MAX_IMPORT_NOTES = 20    # what a notebook's guarded top-level code raised at import (grader.course.scratch)
MAX_LAUNCHES = 10_000    # per call
MAX_LIST = 10_000        # warnings, written arrays, per-line entries of one launch
PRINTED_LINES = 20       # of what a call's kernels printed (grader.device.kernel_output)
PRINTED_LINE = 210       # characters of one of those lines, the device's own cut included
# how the runner's side words a request the device process ended under (grader.device.client); the
# judge, which can see why that process ended, adds the reason (grader.judge.student)
DEVICE_STOPPED = "the simulated GPU stopped"
# "unavailable": the machine cannot do what was asked (no CuPy or NCCL, fewer GPUs than ranks, a
# backend that times nothing): not the student's failure, nor the runner's
ERROR_KINDS = frozenset({"import", "not_implemented", "simulator", "exception", "missing", "protocol",
                         "context_lost", "unavailable"})
# counters[space requests] -> (their units, the accesses they serve)
_REQUESTS = {"global_load_requests": ("global_load_sectors", "global_loads"),
             "global_store_requests": ("global_store_sectors", "global_stores"),
             "shared_requests": ("bank_conflict_wavefronts", None)}
_LANES = 32


def _text(value: Any, where: str, cap: int = MAX_MESSAGE, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ProtocolError(f"{where}: expected a string, got {type(value).__name__}")
    return value if len(value) <= cap else value[:cap] + f" ... [{len(value) - cap} characters cut]"


def _number(value: Any, where: str, low: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProtocolError(f"{where}: expected a number, got {type(value).__name__}")
    if not math.isfinite(value) or value < low:
        raise ProtocolError(f"{where}: {value!r} is not a finite number >= {low:g}")
    return value


def _int(value: Any, where: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ProtocolError(f"{where}: expected an integer >= {low}, got {value!r}")
    return value


def _one_of(value: Any, allowed: frozenset, where: str) -> str:
    """One of the `allowed` names (a list or dict is refused as such, not as a TypeError)."""
    if not isinstance(value, str) or value not in allowed:
        raise ProtocolError(f"{where}: {str(value)[:40]!r} is not one of {sorted(allowed)}")
    return value


def _dict(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise ProtocolError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, where: str, cap: int = MAX_LIST) -> list:
    if not isinstance(value, list):
        raise ProtocolError(f"{where}: expected a list, got {type(value).__name__}")
    if len(value) > cap:
        raise ProtocolError(f"{where}: {len(value)} entries, at most {cap}")
    return value


def _plain(value: Any, where: str, depth: int = 0) -> Any:
    """Nested plain data (a compile report): strings capped, numbers finite, depth and size bounded."""
    if depth > 6:
        raise ProtocolError(f"{where}: nested too deep")
    if isinstance(value, dict):
        _list(list(value), where, 200)
        return {str(k)[:MAX_NAME]: _plain(v, f"{where}.{k}", depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(_list(value, where, 200))]
    if isinstance(value, str):
        return _text(value, where)
    if isinstance(value, float) and not math.isfinite(value):
        raise ProtocolError(f"{where}: {value!r} is not finite")
    if value is None or isinstance(value, (bool, int, float)):
        return value
    raise ProtocolError(f"{where}: unexpected {type(value).__name__}")


def _dim3(value: Any, where: str) -> tuple[int, int, int]:
    dims = _list(value, where, 3)
    if len(dims) != 3:
        raise ProtocolError(f"{where}: expected 3 dimensions")
    return tuple(_int(d, f"{where}[{i}]", 1) for i, d in enumerate(dims))


CHECKS = frozenset({"bounds", "races", "uninitialised", "barriers", "warps", "deadlock", "launch", "devices",
                    "compile", "unsupported", "streams", "error"})


def _coords(value: Any, where: str) -> tuple[int, ...] | None:
    """A block, thread or index: one integer or up to 8 of them, or absent."""
    if value is None:
        return None
    items = value if isinstance(value, (list, tuple)) else [value]
    if not 1 <= len(items) <= 8:
        raise ProtocolError(f"{where}: expected 1 to 8 coordinates")
    return tuple(_int(v, f"{where}[{i}]", -(1 << 62)) for i, v in enumerate(items))


@dataclass(frozen=True)
class Finding:
    """What the simulator found, as a record: which checker, where in the student's code, which
    block and thread, which array and index, and the whole message."""

    check: str
    type: str
    message: str
    kernel: str | None = None
    file: str | None = None
    line: int | None = None
    block: tuple[int, ...] | None = None
    thread: tuple[int, ...] | None = None
    array: str | None = None
    index: tuple[int, ...] | None = None

    @classmethod
    def parse(cls, doc: Any, where: str = "finding") -> "Finding":
        doc = _dict(doc, where)
        check = _one_of(doc.get("check", "error"), CHECKS, f"{where}.check")
        line = doc.get("line")
        return cls(check, _text(doc.get("type", "SimError"), f"{where}.type", MAX_NAME),
                   _text(doc.get("message", ""), f"{where}.message", MAX_TEXT),
                   _text(doc.get("kernel"), f"{where}.kernel", MAX_NAME, optional=True),
                   _text(doc.get("file"), f"{where}.file", MAX_NAME, optional=True),
                   None if line is None else _int(line, f"{where}.line"),
                   _coords(doc.get("block"), f"{where}.block"), _coords(doc.get("thread"), f"{where}.thread"),
                   _text(doc.get("array"), f"{where}.array", MAX_NAME, optional=True),
                   _coords(doc.get("index"), f"{where}.index"))

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def error_reply(kind: str, type: str, message: str, **rest: Any) -> dict:
    """A failed request's reply, in the one shape `ErrorInfo.parse` reads (runner and device alike)."""
    return {"ok": False, "error": {"kind": kind, "type": type, "message": message, **rest}}


@dataclass(frozen=True)
class ErrorInfo:
    kind: str
    type: str
    message: str
    detail: str = ""
    where: str = ""
    traceback: str = ""
    finding: Finding | None = None  # kind "simulator": the simulator's record of it

    @classmethod
    def parse(cls, doc: Any, where: str = "error") -> "ErrorInfo":
        doc = _dict(doc, where)
        kind = _one_of(doc.get("kind", "exception"), ERROR_KINDS, f"{where}.kind")
        finding = doc.get("finding")
        return cls(kind, _text(doc.get("type", "Error"), f"{where}.type", MAX_NAME),
                   _text(doc.get("message", ""), f"{where}.message"),
                   _text(doc.get("detail", ""), f"{where}.detail", MAX_TEXT),
                   _text(doc.get("where", ""), f"{where}.where", MAX_NAME),
                   _text(doc.get("traceback", ""), f"{where}.traceback", MAX_TEXT),
                   None if finding is None else Finding.parse(finding, f"{where}.finding"))


@dataclass(frozen=True)
class LaunchSummary:
    """One kernel launch: from the device process (its counters are what performance criteria
    read), or from a runner with the simulator inline (`--simulator inline`: feedback only).
    The fields mirror grader.sim's LaunchRecord on purpose: the wire imports nothing of it."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    device: int
    executor: str
    fallback_reason: str | None
    counters: dict[str, float]
    warnings: list[str] = field(default_factory=list)
    arrays_written: list[str] = field(default_factory=list)
    arrays_read: list[str] = field(default_factory=list)
    compiled: dict = field(default_factory=dict)
    lines: list[dict] = field(default_factory=list)
    typing_note: str | None = None
    ms: float | None = None  # the kernel's time between two CUDA events, from a GPU's device process

    @classmethod
    def parse(cls, doc: Any, where: str = "launch") -> "LaunchSummary":
        doc = _dict(doc, where)
        counters = {}
        for key, value in _dict(doc.get("counters", {}), f"{where}.counters").items():
            counters[_text(key, f"{where}.counters key", MAX_NAME)] = _number(value, f"{where}.counters.{key}")
        _consistent(counters, f"{where}.counters")
        lines = []
        for i, entry in enumerate(_list(doc.get("lines", []), f"{where}.lines")):
            entry = _dict(entry, f"{where}.lines[{i}]")
            at = f"{where}.lines[{i}]"
            if entry.get("kind") == "atomic":  # atomic operations of a line (no requests, no sectors)
                lines.append({"line": _int(entry.get("line", 0), f"{at}.line"),
                              "space": _text(entry.get("space", ""), f"{at}.space", MAX_NAME),
                              "kind": "atomic", "atomics": _int(entry.get("atomics", 0), f"{at}.atomics")})
                continue
            unit = "sectors" if entry.get("space") == "global" else "wavefronts"
            requests = _number(entry.get("requests", 0), f"{at}.requests")
            units = _number(entry.get(unit, 0), f"{at}.{unit}")
            if requests and not requests <= units <= _LANES * requests:
                raise ProtocolError(f"{at}: {units:g} {unit} for {requests:g} requests is impossible")
            parsed = {"line": _int(entry.get("line", 0), f"{at}.line"),
                      "space": _text(entry.get("space", ""), f"{at}.space", MAX_NAME),
                      "kind": _text(entry.get("kind", ""), f"{at}.kind", MAX_NAME),
                      "requests": requests, unit: units}
            if entry.get("sample") is not None:
                parsed["sample"] = _request_sample(entry["sample"], f"{at}.sample")
            lines.append(parsed)
        return cls(
            kernel=_text(doc.get("kernel"), f"{where}.kernel", MAX_NAME),
            grid=_dim3(doc.get("grid"), f"{where}.grid"),
            block=_dim3(doc.get("block"), f"{where}.block"),
            shared_bytes=_int(doc.get("shared_bytes", 0), f"{where}.shared_bytes"),
            device=_int(doc.get("device", 0), f"{where}.device"),
            executor=_text(doc.get("executor", ""), f"{where}.executor", MAX_NAME),
            fallback_reason=_text(doc.get("fallback_reason"), f"{where}.fallback_reason", optional=True),
            counters=counters,
            warnings=[_text(w, f"{where}.warnings[{i}]") for i, w in enumerate(_list(doc.get("warnings", []), f"{where}.warnings"))],
            arrays_written=[_text(a, f"{where}.arrays_written[{i}]", MAX_NAME)
                            for i, a in enumerate(_list(doc.get("arrays_written", []), f"{where}.arrays_written"))],
            arrays_read=[_text(a, f"{where}.arrays_read[{i}]", MAX_NAME)
                         for i, a in enumerate(_list(doc.get("arrays_read", []), f"{where}.arrays_read"))],
            compiled=_plain(_dict(doc.get("compiled", {}), f"{where}.compiled"), f"{where}.compiled"),
            lines=lines,
            typing_note=_text(doc.get("typing_note"), f"{where}.typing_note", optional=True),
            ms=None if doc.get("ms") is None else float(_number(doc["ms"], f"{where}.ms")),
        )

    def as_dict(self) -> dict:
        """The plain form the performance criteria and reports read."""
        return {"kernel": self.kernel, "grid": list(self.grid), "block": list(self.block),
                "shared_bytes": self.shared_bytes, "device": self.device, "executor": self.executor,
                "fallback_reason": self.fallback_reason, "counters": dict(self.counters),
                "warnings": list(self.warnings), "arrays_written": list(self.arrays_written),
                "arrays_read": list(self.arrays_read),
                "compiled": self.compiled, "lines": [dict(e) for e in self.lines], "typing_note": self.typing_note,
                **({"ms": self.ms} if self.ms is not None else {})}


def _request_sample(doc: Any, where: str) -> dict:
    """One warp's request of a line (grader.sim.counters.lines): its lanes (0..31, one entry
    each) and the byte addresses they asked for, relative to an aligned base."""
    doc = _dict(doc, where)
    lanes = [_int(x, f"{where}.lanes") for x in _list(doc.get("lanes", []), f"{where}.lanes", _LANES)]
    addresses = [_int(x, f"{where}.addresses") for x in _list(doc.get("addresses", []), f"{where}.addresses", _LANES)]
    itemsize = _int(doc.get("itemsize", 0), f"{where}.itemsize")
    if len(lanes) != len(addresses) or any(lane >= _LANES for lane in lanes) or itemsize not in (1, 2, 4, 8, 16):
        raise ProtocolError(f"{where}: not one warp's request (lanes {lanes[:4]}..., item size {itemsize})")
    return {"lanes": lanes, "addresses": addresses, "itemsize": itemsize}


def _consistent(counters: dict[str, float], where: str) -> None:
    for requests_key, (units_key, accesses_key) in _REQUESTS.items():
        requests = counters.get(requests_key, 0)
        units = counters.get(units_key, 0)
        if requests == 0:
            if units:
                raise ProtocolError(f"{where}: {units_key} = {units:g} without any {requests_key}")
            continue
        if not requests <= units <= _LANES * requests:
            raise ProtocolError(f"{where}: {units_key} = {units:g} for {requests_key} = {requests:g} is impossible "
                                f"(one request is 1 to {_LANES})")
        if accesses_key is not None and accesses_key in counters and \
                not requests <= counters[accesses_key] <= _LANES * requests:
            raise ProtocolError(f"{where}: {accesses_key} = {counters[accesses_key]:g} for {requests_key} = "
                                f"{requests:g} is impossible")


@dataclass(frozen=True)
class Reply:
    """The reply to `import`, `configure` or `ping`: ok, or the error. An import's `notes`: what a
    notebook's guarded top-level code raised (feedback only: the student's process said it)."""

    ok: bool
    error: ErrorInfo | None = None
    backend: str = ""
    notes: tuple[str, ...] = ()

    @classmethod
    def parse(cls, doc: Any) -> "Reply":
        doc = _dict(doc, "reply")
        ok = doc.get("ok")
        if not isinstance(ok, bool):
            raise ProtocolError("reply.ok: expected true or false")
        error = None if ok else ErrorInfo.parse(doc.get("error", {}))
        notes = tuple(_text(note, f"reply.notes[{i}]") for i, note in
                      enumerate(_list(doc.get("notes", []), "reply.notes", MAX_IMPORT_NOTES)))
        return cls(ok, error, _text(doc.get("backend", ""), "reply.backend", MAX_NAME), notes)


@dataclass(frozen=True)
class CallReply:
    """The reply to `call`: what the function returned, its array arguments after the call, and
    the launches it made; or the error and the launches made before it."""

    ok: bool
    returned: Any = None
    args: list = field(default_factory=list)
    launches: list[LaunchSummary] = field(default_factory=list)
    error: ErrorInfo | None = None

    @classmethod
    def parse(cls, doc: Any, sent_args: list) -> "CallReply":
        base = Reply.parse(doc)
        launches = [LaunchSummary.parse(launch, f"launches[{i}]")
                    for i, launch in enumerate(_list(doc.get("launches", []), "launches", MAX_LAUNCHES))]
        if not base.ok:
            return cls(False, launches=launches, error=base.error)
        args = _list(doc.get("args", []), "args")
        if len(args) != len(sent_args):
            raise ProtocolError(f"args: {len(args)} arguments back for {len(sent_args)} sent")
        for i, (back, sent) in enumerate(zip(args, sent_args)):
            if isinstance(sent, np.ndarray):
                if not isinstance(back, np.ndarray) or back.shape != sent.shape or back.dtype != sent.dtype:
                    raise ProtocolError(f"args[{i}]: not the {sent.dtype}{list(sent.shape)} array that was sent")
            elif back is not None:
                raise ProtocolError(f"args[{i}]: a value came back for an argument that is not an array")
        return cls(True, _returned(doc.get("returned"), "returned"), args, launches)


MAX_TIMED_CALLS = 1000
TIMING_STOPS = frozenset({"precise", "time cap", "repeat cap"})


@dataclass(frozen=True)
class TimingReply:
    """The reply to `time`: the kernel time of each timed call (CUDA events, ms), the launches per
    call, the runner's own wall clock over them, why it stopped, the GPU's name, and the last
    output of each input set (the judge re-checks them); or the error."""

    ok: bool
    times_ms: list[float] = field(default_factory=list)
    launches_per_call: int = 0
    wall_s: float = 0.0
    stopped: str = ""
    device: str = ""
    outputs: list = field(default_factory=list)
    error: ErrorInfo | None = None

    @classmethod
    def parse(cls, doc: Any, input_sets: int) -> "TimingReply":
        base = Reply.parse(doc)
        if not base.ok:
            return cls(False, error=base.error)
        times = [_number(t, f"times_ms[{i}]") for i, t in enumerate(_list(doc.get("times_ms"), "times_ms",
                                                                             MAX_TIMED_CALLS))]
        if not times:
            raise ProtocolError("times_ms: no timed call")
        stopped = _one_of(doc.get("stopped"), TIMING_STOPS, "stopped")
        outputs = _list(doc.get("outputs"), "outputs", input_sets)
        if len(outputs) != input_sets:
            raise ProtocolError(f"outputs: {len(outputs)} for {input_sets} input sets")
        return cls(True, times, _int(doc.get("launches_per_call"), "launches_per_call"),
                   _number(doc.get("wall_s"), "wall_s"), stopped,
                   _text(doc.get("device", ""), "device", MAX_NAME),
                   [_returned(o, f"outputs[{i}]") for i, o in enumerate(outputs)])


MAX_RANK_DEVICES = 1024


@dataclass(frozen=True)
class RanksTimingReply:
    """The reply to `time_ranks` (a student's all-reduce) or `nccl_allreduce` (NCCL's, in the
    reference runner): the host seconds of each timed call (call + every rank synchronised), how
    many GPUs the ranks were spread over and the GPU's name; or the error. `timed` and `ranks`,
    where given, are what the judge asked for: exactly `timed` seconds, at most `ranks` devices."""

    ok: bool
    seconds: list[float] = field(default_factory=list)
    devices: int = 0
    error: ErrorInfo | None = None
    device: str = ""

    @classmethod
    def parse(cls, doc: Any, timed: int | None = None, ranks: int | None = None) -> "RanksTimingReply":
        base = Reply.parse(doc)
        if not base.ok:
            return cls(False, error=base.error)
        seconds = []
        for i, value in enumerate(_list(doc.get("seconds"), "seconds", MAX_TIMED_CALLS)):
            value = _number(value, f"seconds[{i}]")
            if not value > 0:
                raise ProtocolError(f"seconds[{i}]: {value!r} is not a positive time")
            seconds.append(float(value))
        if not seconds:
            raise ProtocolError("seconds: no timed call")
        if timed is not None and len(seconds) != timed:
            raise ProtocolError(f"seconds: {len(seconds)} timed calls for {timed} asked")
        devices = _int(doc.get("devices"), "devices", 1)
        most = MAX_RANK_DEVICES if ranks is None else ranks
        if devices > most:
            raise ProtocolError(f"devices: {devices}, more than {most}" + (f" for {ranks} ranks" if ranks else ""))
        return cls(True, seconds, devices, device=_text(doc.get("device", ""), "device", MAX_NAME))


def _returned(value: Any, where: str, depth: int = 0) -> Any:
    """What a student's function may return: arrays, numbers, strings (capped), lists of those."""
    if depth > 4:
        raise ProtocolError(f"{where}: nested too deep")
    if isinstance(value, (np.ndarray, np.generic, bool, int, float)) or value is None:
        return value
    if isinstance(value, str):
        return _text(value, where, MAX_TEXT)
    if isinstance(value, list):
        return [_returned(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(_list(value, where, 1000))]
    raise ProtocolError(f"{where}: unexpected {type(value).__name__}")


@dataclass(frozen=True)
class Transfer:
    """One copy between host and device memory during a call, as the device process saw it."""

    digest: str
    nbytes: int
    kernel_written: bool = False     # downloads: the memory was last written by a kernel of this call
    head: np.ndarray | None = None   # the first values (a returned scalar is one of them; where a piece lies)
    id: int = 0                      # uploads: the device's number for it
    sources: tuple[int, ...] = ()    # downloads: the uploads the memory was computed from
    neutral: bool = False            # uploads: carries no answer (one start value everywhere: 0, 1, inf...; RNG states)
    what: str = ""                   # uploads: what it was, in the student's terms (feedback only)
    carried: int = 0                 # downloads: elements still the bytes the host wrote there
    carried_from: tuple[int, ...] = ()  # downloads: the uploads that wrote those bytes
    carried_first: int = -1          # downloads: the first of those elements (C order), -1: none
    shape: tuple[int, ...] | None = None  # the array's shape (a piece of an array is told by it)
    # downloads: (shape, digest, carried, carried_first) of what the host may have made of it for
    # each of the call's answers: its leading block of a smaller shape (a padded output, the
    # answer sliced from it), the whole converted to the answer's dtype (computed in float64,
    # converted back), or the same of its transpose (a matrix); `carried` and `carried_first` as
    # above, of the block's elements
    blocks: tuple[tuple[tuple[int, ...], str, int, int], ...] = ()
    total: float | None = None       # kernel-written downloads of numbers: the sum of their elements

    @classmethod
    def parse(cls, doc: Any, where: str, download: bool) -> "Transfer":
        doc = _dict(doc, where)
        head = doc.get("head")
        if (download or head is not None) and not (isinstance(head, np.ndarray) and head.ndim == 1 and head.size <= 64):
            raise ProtocolError(f"{where}.head: expected the first values of the copy")
        shape = doc.get("shape")
        if shape is not None:
            shape = _shape(shape, f"{where}.shape")
        kernel_written = doc.get("kernel_written", False)
        if not isinstance(kernel_written, bool):
            raise ProtocolError(f"{where}.kernel_written: expected true or false")
        neutral = doc.get("neutral", False)
        if not isinstance(neutral, bool):
            raise ProtocolError(f"{where}.neutral: expected true or false")
        ids = {key: tuple(_int(u, f"{where}.{key}[{i}]") for i, u in enumerate(_list(doc.get(key, []), f"{where}.{key}")))
               for key in ("sources", "carried_from")}
        blocks = tuple(_block(b, f"{where}.blocks[{i}]")
                       for i, b in enumerate(_list(doc.get("blocks", []), f"{where}.blocks", 2 * MAX_ANSWER_SHAPES)))
        return cls(_text(doc.get("digest"), f"{where}.digest", 64), _int(doc.get("nbytes"), f"{where}.nbytes"),
                   kernel_written, head, _int(doc.get("id", 0), f"{where}.id"), ids["sources"],
                   neutral, _text(doc.get("what", ""), f"{where}.what", MAX_NAME), _int(doc.get("carried", 0), f"{where}.carried"),
                   ids["carried_from"], _int(doc.get("carried_first", -1), f"{where}.carried_first", -1), shape, blocks,
                   None if doc.get("total") is None else _number(doc["total"], f"{where}.total", -math.inf))


MAX_ANSWER_SHAPES = 16  # shapes of a call's answers the device looks for as leading blocks of downloads


def _shape(value: Any, where: str) -> tuple[int, ...]:
    return tuple(_int(d, f"{where}[{i}]") for i, d in enumerate(_list(value, where, 32)))


def _block(doc: Any, where: str) -> tuple[tuple[int, ...], str, int, int]:
    doc = _dict(doc, where)
    return (_shape(doc.get("shape"), f"{where}.shape"), _text(doc.get("digest"), f"{where}.digest", 64),
            _int(doc.get("carried", 0), f"{where}.carried"),
            _int(doc.get("carried_first", -1), f"{where}.carried_first", -1))


OP_KINDS = frozenset({"kernel", "copy", "sync"})
MAX_OPS = 50_000          # per call: kernels, copies and host waits in stream order
MAX_STREAMS = 4096        # streams one operation may be ordered after


@dataclass(frozen=True)
class StreamOp:
    """One operation of a call in the simulated GPUs' stream order (grader/sim/streams.py): a
    kernel, a copy (src/dst: devices, -1 the host) or a host wait; `after`: (stream, tick) pairs
    it is ordered after. What the performance model schedules into a timeline."""

    index: int
    kind: str
    device: int
    stream: int
    tick: int
    after: tuple[tuple[int, int], ...]
    name: str
    nbytes: int = 0
    src: int | None = None
    dst: int | None = None
    launch: int | None = None
    default: bool = False  # on its device's legacy default stream
    site: str = ""  # where the student's code issued it (messages only)

    @classmethod
    def parse(cls, doc: Any, where: str) -> "StreamOp":
        doc = _dict(doc, where)
        after = []
        for i, pair in enumerate(_list(doc.get("after", []), f"{where}.after", MAX_STREAMS)):
            pair = _list(pair, f"{where}.after[{i}]", 2)
            if len(pair) != 2:
                raise ProtocolError(f"{where}.after[{i}]: expected [stream, tick]")
            after.append((_int(pair[0], f"{where}.after[{i}]"), _int(pair[1], f"{where}.after[{i}]")))
        kind = _one_of(doc.get("kind"), OP_KINDS, f"{where}.kind")
        ends = {}
        if kind == "copy":
            ends = {key: _int(doc.get(key), f"{where}.{key}", low=-1) for key in ("src", "dst")}
        launch = doc.get("launch")
        return cls(_int(doc.get("index"), f"{where}.index"), kind, _int(doc.get("device"), f"{where}.device", low=-1),
                   _int(doc.get("stream", 0), f"{where}.stream"), _int(doc.get("tick", 0), f"{where}.tick"),
                   tuple(after), _text(doc.get("name", ""), f"{where}.name", MAX_NAME),
                   _int(doc.get("nbytes", 0), f"{where}.nbytes"), ends.get("src"), ends.get("dst"),
                   None if launch is None else _int(launch, f"{where}.launch"), doc.get("default") is True,
                   _text(doc.get("site", ""), f"{where}.site", MAX_SITE))

    def as_dict(self) -> dict:
        return {"index": self.index, "kind": self.kind, "device": self.device, "stream": self.stream,
                "tick": self.tick, "after": [list(p) for p in self.after], "name": self.name, "nbytes": self.nbytes,
                "src": self.src, "dst": self.dst, "launch": self.launch, "default": self.default,
                "site": self.site}


@dataclass(frozen=True)
class DeviceReport:
    """What happened on the simulated GPU during one call, from the device process (never
    through the runner): launches with their counters, findings, the copies made, and every
    kernel, copy and host wait in stream order (`timeline`; `timeline_truncated`: some were cut),
    and the first lines its kernels printed (`printed`; `printed_more`: how many more there were)."""

    call: int
    launches: list[LaunchSummary]
    findings: list[ErrorInfo]
    uploads: list[Transfer]
    downloads: list[Transfer]
    timeline: list[StreamOp] = field(default_factory=list)
    timeline_truncated: bool = False
    printed: tuple[str, ...] = ()
    printed_more: int = 0

    @classmethod
    def parse(cls, doc: Any) -> "DeviceReport":
        base = Reply.parse(doc)
        if not base.ok:
            raise ProtocolError(f"the device refused the report: {base.error.message}")
        return cls(_int(doc.get("call"), "report.call"),
                   [LaunchSummary.parse(d, f"report.launches[{i}]")
                    for i, d in enumerate(_list(doc.get("launches", []), "report.launches", MAX_LAUNCHES))],
                   [ErrorInfo.parse(d, f"report.findings[{i}]")
                    for i, d in enumerate(_list(doc.get("findings", []), "report.findings"))],
                   [Transfer.parse(d, f"report.uploads[{i}]", False)
                    for i, d in enumerate(_list(doc.get("uploads", []), "report.uploads"))],
                   [Transfer.parse(d, f"report.downloads[{i}]", True)
                    for i, d in enumerate(_list(doc.get("downloads", []), "report.downloads"))],
                   [StreamOp.parse(d, f"report.timeline[{i}]")
                    for i, d in enumerate(_list(doc.get("timeline", []), "report.timeline", MAX_OPS))],
                   bool(doc.get("timeline_truncated", False)),
                   tuple(_text(line, f"report.printed[{i}]", PRINTED_LINE)
                         for i, line in enumerate(_list(doc.get("printed", []), "report.printed", PRINTED_LINES))),
                   _int(doc.get("printed_more", 0), "report.printed_more"))


def is_number(value: Any) -> bool:
    """A number a kernel may be given or a call may take (a Python or NumPy int, float or complex),
    bools aside: what the data flow checks as possibly carrying an answer."""
    return isinstance(value, (int, float, complex, np.number)) and not isinstance(value, (bool, np.bool_))
