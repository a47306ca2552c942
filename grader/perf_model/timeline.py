"""A modelled timeline of one call on several GPUs: the simulated GPUs' stream order (every kernel,
copy and host wait, each with what it is ordered after: grader/sim/streams.py) scheduled on a GPU
preset's resources.

Each operation starts when the host has issued it (`host_issue_us` per call, one host thread),
when everything it is ordered after has ended (its stream's earlier work, the events it waits
for, the legacy default stream), and when its resource is free: one per device for kernels (a
kernel of an all-reduce fills its GPU's memory bandwidth), one per direction of each GPU pair for
peer copies (`peer_bandwidth_gbs`, `peer_latency_us`), one per direction of each GPU's host link.
A host wait moves the host's clock to the end of what it waits for. Pure arithmetic over plain
data, like the rest of the model: the judge applies it to the device process's report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from . import Gpu, launch_time

HOST = -1


@dataclass(frozen=True)
class Span:
    """One operation on the modelled timeline."""

    index: int
    kind: str            # "kernel" or "copy"
    device: int
    stream: int
    start_s: float
    end_s: float
    name: str
    src: int | None = None
    dst: int | None = None
    default: bool = False  # on its device's legacy default stream
    site: str = ""  # where the student's code issued it ("at f.py:94 in add_on, ..."): messages

    @property
    def peer(self) -> bool:
        return self.kind == "copy" and HOST not in (self.src, self.dst) and self.src != self.dst


@dataclass(frozen=True)
class Timeline:
    spans: list[Span]
    host_waits: int
    waits_between_copies: int  # times the host stopped after the first GPU-to-GPU copy and before the last
    issued_s: float = 0.0      # when the host had issued its last kernel or GPU-to-GPU copy (`host_issue_us` each)
    buffer_bytes: int = 0      # the buffer it is modelled as on (grader/judge/collective.timeline_of); 0: as run

    @property
    def host_bound(self) -> bool:
        """The GPUs mostly wait for the host: its last kernel or GPU-to-GPU copy was issued within
        the last tenth of the device work (one Python thread issues every rank's copies and
        kernels; the host's own copies of the outputs come after the work, whatever bounds it)."""
        spans = self._device_spans()
        if not spans:
            return False
        first, last = min(s.start_s for s in spans), max(s.end_s for s in spans)
        return self.issued_s >= first + 0.9 * (last - first)

    def _device_spans(self) -> list[Span]:
        return [s for s in self.spans if s.kind == "kernel" or s.peer]

    @property
    def makespan_s(self) -> float:
        """From the first kernel or GPU-to-GPU copy to the end of the last one (the host's own
        copies of the inputs and outputs are the same for every solution: left out)."""
        spans = self._device_spans()
        if not spans:
            return 0.0
        return max(s.end_s for s in spans) - min(s.start_s for s in spans)

    def overlap_s(self) -> float:
        """How long some kernel and some GPU-to-GPU copy run at the same time."""
        return _measure(_intersect(_union([s for s in self.spans if s.kind == "kernel"]),
                                   _union([s for s in self.spans if s.peer])))

    def busy_s(self, kind: str) -> float:
        """How long some operation of `kind` ("kernel" or "copy": GPU-to-GPU) runs."""
        chosen = [s for s in self.spans if (s.kind == "kernel" if kind == "kernel" else s.peer)]
        return _measure(_union(chosen))


def copy_seconds(nbytes: int, src: int, dst: int, g: Gpu) -> float:
    if HOST in (src, dst):
        return nbytes / (g.host_bandwidth_gbs * 1e9)
    if src == dst:
        return 2 * nbytes / g.dram_bps
    return g.peer_latency_us * 1e-6 + nbytes / (g.peer_bandwidth_gbs * 1e9)


class Scheduler:
    """The timeline built one operation at a time, in issue order (`schedule` runs it over a whole
    log; the simulator's events read it as the host issues work: grader/sim/event_clock.py). A
    later operation never moves an earlier one."""

    def __init__(self, g: Gpu, scale: float = 1.0, keep_timeline: bool = True):
        # keep_timeline: keep what `timeline()` reads (each span, the order of waits and peer copies);
        # the event clock reads only the host's clock and the end times
        self.g, self.scale, self.keep_timeline = g, scale, keep_timeline
        self.host = 0.0  # the host's clock: issue costs, and the waits that move it on
        self.device_issued = 0.0  # the host's clock when it issued its last kernel or GPU-to-GPU copy
        self.spans: list[Span] = []
        self.waits = 0
        self._ends: dict[tuple[int, int], float] = {}  # (stream, tick) -> end
        self._waited: dict[int, int] = {}               # stream -> the last tick the host waited for
        self._free: dict[tuple, float] = {}             # resource -> when it is free
        self._events: list[str] = []                    # "sync" | "peer" | "work", for waits between copies

    def end_of(self, clock) -> float:
        """When everything `clock` names has ended ([stream, tick] pairs, or {stream: tick})."""
        pairs = clock.items() if isinstance(clock, dict) else clock
        return max((self._ends.get((int(s), int(t)), 0.0) for s, t in pairs), default=0.0)

    def add(self, op: dict, launch: dict | None = None) -> Span | None:
        """Schedule `op` (plain data: grader/sim/streams.Op.summary); `launch`: a kernel's launch
        record, whose modelled time is the kernel's duration. None for a host wait."""
        g = self.g
        ready = self.end_of(op.get("after", []))
        kind = op.get("kind")
        if kind == "sync":
            self.host = max(self.host, ready)
            self.waits += 1
            if self.keep_timeline:
                self._events.append("sync")
            self._forget(op.get("after", []))
            return None
        self.host += g.host_issue_us * 1e-6
        if kind == "kernel":
            overhead = g.launch_overhead_us * 1e-6
            if not launch:
                duration = overhead
            elif self.scale == 1.0:
                duration = launch_time(launch, g).seconds
            else:  # the work at full occupancy (a large problem fills the GPU), times the scale
                duration = overhead + launch_time(launch, g, steady=True).seconds * self.scale
            resource: tuple = ("sm", op.get("device"))
        else:
            src, dst = int(op.get("src", HOST)), int(op.get("dst", HOST))
            nbytes = int(op.get("nbytes", 0))
            duration = copy_seconds(int(nbytes * self.scale) if HOST not in (src, dst) else nbytes, src, dst, g)
            resource = ("link", src, dst)
        peer = kind != "kernel" and HOST not in (src, dst) and src != dst
        if kind == "kernel" or peer:
            self.device_issued = self.host
        if self.keep_timeline:
            self._events.append("peer" if peer else "work")
        start = max(self.host, ready, self._free.get(resource, 0.0))
        end = start + duration
        self._free[resource] = end
        self._ends[(int(op.get("stream", 0)), int(op.get("tick", 0)))] = end
        span = Span(int(op.get("index", len(self.spans))), str(kind), int(op.get("device", 0)),
                    int(op.get("stream", 0)), start, end, str(op.get("name", "")), op.get("src"), op.get("dst"),
                    bool(op.get("default")), str(op.get("site") or ""))
        if self.keep_timeline:
            self.spans.append(span)
        return span

    def _forget(self, waited) -> None:
        """Drop the ends of what the host has now waited for: a stream's work ends in order, so
        each ended by the host's clock, and any later operation or event waiting on it starts no
        earlier than that clock anyway (a long run keeps only what is still in flight)."""
        for stream, tick in waited:
            stream, tick = int(stream), int(tick)
            for gone in range(self._waited.get(stream, 0) + 1, tick + 1):
                self._ends.pop((stream, gone), None)
            self._waited[stream] = max(self._waited.get(stream, 0), tick)

    def timeline(self) -> Timeline:
        # a host wait is where the host stops: the syncs one after another with no work issued between
        # (ranks.synchronize() is each stream's and each device's) are one
        peers = [i for i, what in enumerate(self._events) if what == "peer"]
        between = sum(1 for i, what in enumerate(self._events)
                      if what == "sync" and self._events[i - 1] != "sync" and peers and peers[0] < i < peers[-1])
        return Timeline(list(self.spans), self.waits, between, self.device_issued)


def schedule(ops: Iterable[dict], launches: list[dict], g: Gpu, scale: float = 1.0) -> Timeline:
    """The timeline of `ops` (the report's stream order, as plain data, in issue order); kernel
    durations are the performance model's for `launches[op["launch"]]`.

    `scale`: the same operations on data `scale` times as large (every GPU-to-GPU copy and every
    kernel's work grows by it; issue costs and latencies do not): the simulator runs buffers of
    kilobytes, and what a pipelined all-reduce gains shows on megabytes, as nccl-tests measure it."""
    scheduler = Scheduler(g, scale)
    for op in ops:
        index = op.get("launch")
        launch = launches[index] if isinstance(index, int) and 0 <= index < len(launches) else None
        scheduler.add(op, launch)
    return scheduler.timeline()


def _union(spans: list[Span]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s in sorted(spans, key=lambda s: s.start_s):
        if out and s.start_s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], s.end_s)
        else:
            out.append([s.start_s, s.end_s])
    return [(a, b) for a, b in out]


def _intersect(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _measure(intervals: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


__all__ = ["Scheduler", "Span", "Timeline", "copy_seconds", "schedule"]
