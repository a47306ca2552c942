"""Stream order on the simulated GPUs: which work a GPU may run at the same time, and the races
that follow when nothing orders two accesses of the same memory.

The simulator runs every copy and kernel at once, in the order the host issues it, so a missing
event wait never changes a result here; on a GPU the same program races. `StreamOrder` keeps what
CUDA's ordering rules say instead, as a vector clock per stream:
- work on one stream runs in issue order;
- `event.record(s)` then `event.wait(t)`: t's later work runs after s's work issued so far;
- the legacy default stream (stream 0) waits for every blocking stream of its device, and they
  wait for it (numba's `cuda.stream()` makes blocking streams);
- a host synchronisation (a stream's, an event's, a device's, a synchronous copy) orders all work
  the host issues later after the work it waited for.
Each access of device memory (a kernel's arrays, as its launch record says it read or wrote them;
each copy's source and destination) is checked against the earlier accesses of the same elements
on other streams: two that conflict (one writes) with neither ordered before the other are a
`StreamRaceError` naming both.

The log of operations (kind, stream, what each is ordered after, bytes, link) is what the device
process reports to the judge, where the performance model schedules it into a modelled timeline
(grader.perf_model.timeline); each operation also goes to `listener` as it is issued (the
simulated events' clock, grader/sim/event_clock.py): nothing here models time.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Callable

from .errors import StreamRaceError, WrongDeviceError
from .sites import called_at, launch_site, launch_stack

HOST = -1  # the host, as one end of a copy
MAX_LOG = 50_000  # operations kept for the report (a call issuing more is cut, and says so)
MAX_ACCESSES = 512  # per allocation: unordered accesses remembered (the oldest are forgotten)


@dataclass
class Op:
    """One operation as the GPU's stream order sees it."""

    index: int                 # issue order in the log
    kind: str                  # "kernel", "copy" or "sync" (the host waits)
    device: int                # the device whose stream runs it (HOST for a sync)
    stream: int                # the stream's id (0 for a sync)
    tick: int                  # its position on that stream
    after: dict[int, int]      # stream id -> the last tick of that stream it is ordered after
    name: str                  # the kernel's name, or what was copied
    nbytes: int = 0
    src: int | None = None     # copies: the source device (HOST: the host)
    dst: int | None = None     # copies: the destination device
    launch: int | None = None  # kernels: the launch's number in this log
    site: str = ""             # where the student's code issued it ("at f.py:94 in add_on, called at ..."): messages
    default: bool = False      # on its device's legacy default stream (the timeline's feedback names it)

    def summary(self) -> dict:
        doc = {"index": self.index, "kind": self.kind, "device": self.device, "stream": self.stream,
               "tick": self.tick, "after": [[s, t] for s, t in sorted(self.after.items())], "name": self.name,
               "nbytes": int(self.nbytes)}
        if self.kind == "copy":
            doc.update(src=self.src, dst=self.dst)
        if self.launch is not None:
            doc["launch"] = self.launch
        if self.default:
            doc["default"] = True
        if self.site:
            doc["site"] = self.site
        return doc


@dataclass
class _Stream:
    ident: int
    device: int
    default: bool
    tick: int = 0
    clock: dict[int, int] = field(default_factory=dict)  # what its next operation is ordered after
    waited: list[int] = field(default_factory=list)  # the streams of the events it waited for (the last few)
    recorded: tuple[int, str] | None = None  # the last event recorded on it: (its tick then, where)
    # its last waits: (the event, how many times it had been recorded then, where the wait was issued,
    # the record waited for: (its stream's tick then, where it was issued), or None)
    waits: list[tuple[object, int, str, tuple[int, str] | None]] = field(default_factory=list)
    made: str = ""  # where the student's code made it ("made at f.py:160"), or the grader's name ("r.stream ...")


@dataclass
class _Access:
    lo: int
    hi: int
    write: bool
    op: Op
    what: str  # how the message names the memory


def _join(a: dict[int, int], b: dict[int, int]) -> dict[int, int]:
    out = dict(a)
    for key, tick in b.items():
        if tick > out.get(key, 0):
            out[key] = tick
    return out


def extent(array) -> tuple[int, int, int]:
    """(allocation id, first element, one past the last element) a device array's view covers."""
    lo = hi = array.offset
    for n, stride in zip(array.shape, array.estrides):
        if n == 0:
            return array._alloc.id, array.offset, array.offset
        reach = (n - 1) * stride
        lo, hi = lo + min(0, reach), hi + max(0, reach)
    return array._alloc.id, lo, hi + 1


WAITS_KEPT = 4  # events a stream waited for that a race message names (the last ones)


class StreamOrder:
    """The stream order of one simulator's devices (see the module docstring)."""

    def __init__(self, listener: Callable[[dict, dict | None], None] | None = None):
        self._lock = threading.RLock()
        self.listener = listener  # told of each operation issued (plain data) and a kernel's launch
        self._ids = itertools.count(1)
        self._streams: dict[int, _Stream] = {}
        self._defaults: dict[int, int] = {}  # device -> its legacy default stream's id
        self._host: dict[int, int] = {}      # what the host has waited for
        self._accesses: dict[int, list[_Access]] = {}
        self.log: list[dict] = []  # the operations as plain data (Op.summary), for the report
        self.truncated = False
        self.launches = 0
        self.host_syncs = 0

    # -- streams ------------------------------------------------------------------------------
    def new_stream(self, device: int) -> int:
        site = launch_site()
        with self._lock:
            ident = next(self._ids)
            self._streams[ident] = _Stream(ident, device, False, made=f"made at {site[0]}:{site[1]}" if site else "")
            return ident

    def name_stream(self, ident: int, name: str) -> None:
        """Messages call stream `ident` `name` (the grader's r.stream of a rank: no line of the
        student's made it)."""
        with self._lock:
            if ident in self._streams:
                self._streams[ident].made = name

    def default(self, device: int) -> int:
        with self._lock:
            if device not in self._defaults:
                ident = next(self._ids)
                self._streams[ident] = _Stream(ident, device, True)
                self._defaults[device] = ident
            return self._defaults[device]

    def resolve(self, stream, device: int) -> int:
        """The id of `stream` (a simulated stream, or 0 / None: the device's default stream)."""
        ident = getattr(stream, "id", None)
        if ident is None or ident not in self._streams:
            return self.default(device)
        return ident

    # -- operations ---------------------------------------------------------------------------
    def _ordered_after(self, s: _Stream) -> dict[int, int]:
        """What an operation issued now on `s` runs after: its stream's earlier work, what the host
        waited for, and the legacy default stream's rule (it waits for every blocking stream of its
        device, and they for it)."""
        clock = _join(s.clock, self._host)
        for other in self._streams.values():
            if other.device != s.device or other is s:
                continue
            if s.default or other.default:  # the legacy default stream and the blocking streams
                clock = _join(clock, other.clock)
        # What the host has waited for orders everything issued from now on: no need to carry it
        # (the accesses it covers were dropped when the host waited), so clocks stay small.
        return {key: tick for key, tick in clock.items() if tick > self._host.get(key, 0)}

    def _issue(self, kind: str, stream: int, name: str, model: dict | None = None, **fields) -> Op:
        s = self._streams[stream]
        clock = self._ordered_after(s)
        # where, with the callers (an add launched in a helper is told with the student's call of it)
        op = Op(len(self.log), kind, s.device, stream, s.tick + 1, dict(clock), name, **fields,
                site=called_at(launch_stack()), default=s.default)
        s.tick += 1
        s.clock = _join(clock, {stream: s.tick})
        self._keep(op, model)
        return op

    def _keep(self, op: Op, model: dict | None = None) -> None:
        """`op` into the log and to the listener, as plain data made once for both."""
        summary = op.summary()
        if self.listener is not None:
            self.listener(summary, model)
        if len(self.log) < MAX_LOG:
            self.log.append(summary)
        else:
            self.truncated = True

    def kernel(self, stream: int, name: str, reads: list, writes: list, model: dict | None = None) -> Op:
        """A kernel on `stream` that read the arrays `reads` and wrote `writes` (with names);
        `model`: its launch as the performance model reads it (for `listener`)."""
        with self._lock:
            op = self._issue("kernel", stream, name, model, launch=self.launches)
            self.launches += 1
            for array, param in reads:
                self._touch(op, array, False, f"its argument {param!r}")
            for array, param in writes:
                self._touch(op, array, True, f"its argument {param!r}")
            return op

    def copy(self, dst, src, stream, current: int) -> Op:
        """A copy into device array `dst` from device array or host array `src` (`stream`: a
        simulated stream, or 0: the default stream; of the current device for a copy between
        devices, of the device array's for a copy from or to the host)."""
        with self._lock:
            src_dev = getattr(src, "device_id", HOST)
            dst_dev = getattr(dst, "device_id", HOST)
            device = dst_dev if src_dev == HOST else src_dev if dst_dev == HOST else current
            synchronous = getattr(stream, "id", None) is None
            peer = HOST not in (src_dev, dst_dev) and src_dev != dst_dev
            if synchronous and peer:  # cudaMemcpyPeer: serialised with all work of both devices
                self._host_waits(self._device_clock(src_dev, dst_dev), f"copy device {src_dev} -> device {dst_dev}")
            ident = self.resolve(stream, device)
            nbytes = int(getattr(src, "nbytes", 0) if src_dev != HOST else getattr(dst, "nbytes", 0))
            op = self._issue("copy", ident, f"copy {_end(src_dev)} -> {_end(dst_dev)}", nbytes=nbytes,
                             src=src_dev, dst=dst_dev)
            if src_dev != HOST:
                self._touch(op, src, False, "its source")
            if dst_dev != HOST:
                self._touch(op, dst, True, "its destination")
            if synchronous and (peer or HOST in (src_dev, dst_dev)):  # the host waits for it
                self._host_waits(self._streams[ident].clock, f"synchronous {op.name}")
            return op

    # -- events and synchronisation -------------------------------------------------------------
    def record(self, event, stream, current: int) -> None:
        with self._lock:
            ident = self.resolve(stream, current)
            s = self._streams[ident]
            made_on = getattr(event, "made_on", None)
            if made_on is not None and made_on != s.device:
                site = called_at(launch_stack())
                raise WrongDeviceError(
                    f"event.record(stream){f' ({site})' if site else ''}: the event was created on device {made_on} "
                    f"and the stream is device {s.device}'s; CUDA refuses that (invalid handle): create the event with "
                    f"device {s.device} current (`with cuda.gpus[{s.device}]:` or `with rank:`; a rank's "
                    f"rank.event() is its device's)")
            # recording is work on the stream, ordered as any: on a blocking stream, after the kernels
            # the legacy default stream was given before it (the audit: adds on the default stream,
            # then `done.record(q.stream)`, were reported racing the next copy)
            s.clock = self._ordered_after(s)
            event.order_clock = dict(s.clock)
            event.recorded_on = ident
            event.records = getattr(event, "records", 0) + 1
            s.recorded = event.recorded_at = (s.tick, called_at(launch_stack()))

    def wait(self, event, stream, current: int) -> None:
        with self._lock:
            ident = self.resolve(stream, current)
            clock = getattr(event, "order_clock", None)
            s = self._streams[ident]
            if clock:  # waiting for an event never recorded does not wait, as in CUDA
                s.clock = _join(s.clock, clock)
            if getattr(event, "recorded_on", None) is not None:
                s.waited = [*s.waited[-(WAITS_KEPT - 1):], event.recorded_on]
            s.waits = [*s.waits[-(WAITS_KEPT - 1):], (event, getattr(event, "records", 0), called_at(launch_stack()),
                                                       getattr(event, "recorded_at", None))]

    def sync_event(self, event) -> None:
        with self._lock:
            self._host_waits(getattr(event, "order_clock", None) or {}, "event.synchronize()")

    def sync_stream(self, stream, current: int) -> None:
        with self._lock:
            ident = self.resolve(stream, current)
            s = self._streams[ident]
            self._host_waits(s.clock, "stream.synchronize()")

    def sync_device(self, device: int | None = None) -> None:
        """`cuda.synchronize()` (the current device), or every device (`device=None`)."""
        with self._lock:
            self._host_waits(self._device_clock(*(() if device is None else (device,))), "cuda.synchronize()")

    def _device_clock(self, *devices: int) -> dict[int, int]:
        """What every stream of `devices` (none: of every device) has been issued so far."""
        clock: dict[int, int] = {}
        for s in self._streams.values():
            if not devices or s.device in devices:
                clock = _join(clock, s.clock)
        return clock

    def _host_waits(self, clock: dict[int, int], name: str) -> None:
        clock = {key: tick for key, tick in clock.items() if tick > self._host.get(key, 0)}  # what is new
        self.host_syncs += 1
        self._host = _join(self._host, clock)
        self._keep(Op(len(self.log), "sync", HOST, 0, 0, dict(clock), name))
        for alloc, entries in list(self._accesses.items()):  # what the host waited for races with nothing later
            kept = [a for a in entries if self._host.get(a.op.stream, 0) < a.op.tick]
            if kept:
                self._accesses[alloc] = kept
            else:
                del self._accesses[alloc]

    # -- the race check -------------------------------------------------------------------------
    def _touch(self, op: Op, array, write: bool, what: str) -> None:
        alloc, lo, hi = extent(array)
        if hi <= lo:
            return
        entries = self._accesses.setdefault(alloc, [])
        for prior in entries:
            if prior.lo < hi and lo < prior.hi and (write or prior.write) and prior.op.stream != op.stream \
                    and op.after.get(prior.op.stream, 0) < prior.op.tick:
                raise StreamRaceError(self._explain(prior, op, write, what, max(lo, prior.lo), min(hi, prior.hi)))
        entries.append(_Access(lo, hi, write, op, what))
        if len(entries) > MAX_ACCESSES:
            del entries[0]

    def _explain(self, prior: _Access, op: Op, write: bool, what: str, lo: int, hi: int) -> str:
        kind = ("write after write" if prior.write else "write after read") if write else "read after write"
        verb = "writes" if write else "reads"
        return (f"stream race ({kind}): {self._describe(op)} {verb} {what} (elements {lo}..{hi - 1} of an allocation "
                f"on device {_owner(op, write)}) while {self._describe(prior.op)}, which "
                f"{'writes' if prior.write else 'reads'} {prior.what}, may still be running: nothing orders the "
                f"two (they are on different streams). On a GPU they can run at the same time. Order them: record an "
                f"event on the first one's stream after it (`e.record(s1)`) and wait for it on the second's "
                f"(`e.wait(s2)`), or synchronize in between{self._waited_elsewhere(op, prior.op)}")

    def _waited_elsewhere(self, op: Op, prior: Op) -> str:
        """Where the racing operation's stream did wait for events, but none recorded on the other's
        stream: the event was recorded on the wrong stream (the add's, not the copy's). Where an
        event was recorded after the other operation, but not yet waited for: the wait comes too
        late (after the launch it was to order)."""
        s = self._streams.get(op.stream)
        waited = s.waited if s else []
        other = self._streams.get(prior.stream)
        what = "kernel" if prior.kind == "kernel" else prior.name  # the other operation, as messages name it
        mine, theirs = self.stream_label(op.stream), self.stream_label(prior.stream)
        if other is not None and other.recorded is not None and other.recorded[0] >= prior.tick \
                and (not waited or prior.stream in waited):
            site = f" ({other.recorded[1]})" if other.recorded[1] else ""
            early = next((where for event, records, where, _ in reversed(s.waits if s else [])
                          if getattr(event, "recorded_on", None) == prior.stream
                          and getattr(event, "records", 0) > records), None)
            if early is not None:  # the wait came first: it waited for the record before (or none)
                return (f". {mine[0].upper()}{mine[1:]} waited for an event ({early}) before the event was "
                        f"recorded on {theirs} after the {what}{site}: a wait orders after the record already "
                        f"issued (an earlier one, or none), so record the event first, then wait for it")
            recorded = (f". An event was recorded on {theirs} after the {what}"
                        f"{site.replace(' (at ', ' (recorded at ')}")
            elsewhere = self._waiter_of(prior.stream, op.stream)
            if elsewhere is not None:  # (the audit: `e.wait(sends[q])`, rank q's copy stream, for q's adds)
                waiter, where = elsewhere
                return (f"{recorded}, and {self.stream_label(waiter)} waited for it ({where}), but not "
                        f"{mine}, on which this runs: a wait orders only its own stream's "
                        f"later work, so wait on the stream of the work it is to order")
            return (f"{recorded}, but {mine} had not waited for it when this was issued: "
                    f"a wait orders only the work issued after it, so call e.wait(stream) before the launch or copy "
                    f"it is to order")
        before = next(((where, at) for event, _, where, at in reversed(s.waits if s else [])
                       if getattr(event, "recorded_on", None) == prior.stream
                       and at is not None and at[0] < prior.tick), None)
        if before is not None:  # (the audit: `arrived.record(sends)` issued above the copy it was to follow)
            where, (_, recorded) = before
            return (f". {mine[0].upper()}{mine[1:]} waited for an event ({where}) recorded on {theirs}"
                    f"{f' (recorded {recorded})' if recorded else ''} before the {what} was issued there, and no "
                    f"event was recorded after it: an event marks the work issued before its record, so record it "
                    f"after the {what}, then wait for it")
        if not waited or prior.stream in waited:
            return ""
        where = ", ".join(self.stream_label(w) for w in dict.fromkeys(waited))
        return (f". Its stream did wait for events, recorded on {where}, but none on {theirs}, where the {what} "
                f"runs: record the event on that stream, after it")

    def _waiter_of(self, recorded_on: int, not_by: int) -> tuple[int, str] | None:
        """(a stream, where it waited) that waited for an event recorded on `recorded_on`, other than
        `not_by` (the stream that should have): the wait was issued on the wrong stream."""
        for ident, other in self._streams.items():
            if ident in (not_by, recorded_on):
                continue
            for event, _, where, _ in reversed(other.waits):
                if getattr(event, "recorded_on", None) == recorded_on:
                    return ident, where
        return None

    # -- the report -----------------------------------------------------------------------------
    def take_log(self) -> tuple[list[dict], bool]:
        """The operations since the last take (as plain data), and whether some were cut."""
        with self._lock:
            log, truncated = self.log, self.truncated
            self.log, self.truncated, self.launches = [], False, 0
            return log, truncated

    def _describe(self, op: Op) -> str:
        where = self.stream_label(op.stream)
        if op.kind == "kernel":
            return f"kernel {op.name!r}{f' (launched {op.site})' if op.site else ''} on {where}"
        return f"the {op.name}{f' ({op.site})' if op.site else ''} on {where}"

    def stream_label(self, ident: int) -> str:
        s = self._streams.get(ident)
        if s is None:
            return f"stream {ident}"
        if s.default:
            return f"device {s.device}'s default stream"
        return f"stream {ident} of device {s.device}{f' ({s.made})' if s.made else ''}"


def _end(device: int) -> str:
    return "host" if device == HOST else f"device {device}"


def _owner(op: Op, write: bool) -> int:
    if op.kind == "copy":
        return op.dst if write else op.src
    return op.device


