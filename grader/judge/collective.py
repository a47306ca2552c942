"""Verdicts on a collective (the all-reduce exercise): the answer on every rank, the traffic
between ranks, and the modelled timeline, all from what the simulated GPUs reported.

The simulated GPUs' stream order (grader/sim/streams.py, in the device process's report) holds
every copy of a call with its source and destination device: on the simulator rank r is virtual
device r, so traffic per link and per rank is counted where the student's code cannot reach it (on
a GPU machine the same call runs on the simulator beside the GPU: BesideTheSimulator). Naive and
ring all-reduces move the same total, 2 (N - 1) buffers: what tells them apart is the maximum per
link and per rank, which links carry anything, and the message structure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from .. import perf_model
from ..perf_model.timeline import Timeline, schedule
from .correctness import WrongAnswer, reduction_rtol
from .perf import PartialCredit, PerformanceShortfall, keep_timing

HOST = -1
WITNESS_BITS = 8  # int32 witness inputs: rank r contributes bit r of the low byte (N <= 8)
MODEL_BUFFER_BYTES = 64 << 20  # a timeline's default size (nccl-tests' middle sizes; bench_allreduce's column)
# stage 3's timeline against the reference's, and its busbw against NCCL's, are modelled (and
# measured) as on a buffer this large: where the links are the bound, so pipelining pays. On 64 MiB
# one Python thread issuing every copy and add is the bound (about 10 us each, 72 at N = 4), and
# fewer, larger pieces win (docs/ALLREDUCE.md, "Sizes")
PIPELINE_BUFFER_BYTES = 1 << 30
MAX_SPANS = 2000  # operations kept for the timeline picture
FORGED_RATIO = 1.5  # a measured busbw this far above NCCL's on the same GPUs is not the student's
# a measured busbw is believed up to this many times what the model allows relative to the
# reference's, measured in the same run (the model's error between two rings on one machine)
MODEL_SLACK = 2.0


# -- inputs and the answer --------------------------------------------------------------------
def rank_inputs(rng: np.random.Generator, ranks: int, n: int, dtype) -> list[np.ndarray]:
    """One buffer per rank. float32: values near 1 (no sum cancels to nothing). int32: witnesses,
    rank r's element i = (1 << r) + 256 * v (v random): the low byte of a sum says which ranks'
    contributions it holds, so a wrong element names the ranks it misses."""
    if np.dtype(dtype) == np.int32:
        if ranks > WITNESS_BITS:
            raise ValueError(f"int32 witnesses need at most {WITNESS_BITS} ranks")
        return [((1 << r) + 256 * rng.integers(0, 1 << 15, n)).astype(np.int32) for r in range(ranks)]
    return [(rng.standard_normal(n) * 0.5 + 1.0).astype(np.float32) for _ in range(ranks)]


def expect_allreduced(outputs: list, inputs: list[np.ndarray], what: str) -> None:
    """Every rank's buffer must hold the element-wise sum of all the inputs."""
    wide = [x.astype(np.float64 if x.dtype.kind == "f" else np.int64) for x in inputs]
    total = sum(wide)
    allowed = reduction_rtol(len(inputs)) * sum(np.abs(w) for w in wide) + 1e-6
    for rank, got in enumerate(outputs):
        if got.dtype.kind in "iu":
            bad = got.astype(np.int64) != total
        else:
            with np.errstate(invalid="ignore"):
                bad = ~(np.abs(got.astype(np.float64) - total) <= allowed)
        if np.any(bad):
            i = int(np.argmax(bad))
            raise WrongAnswer(f"{what}: rank {rank}'s buffer has {int(np.count_nonzero(bad))} of {got.size} "
                              f"elements wrong; first at index {i}: expected {_fmt(total[i])}, got {_fmt(got[i])}"
                              f"{_contributions(got, wide, allowed, bad, i)}")


def _fmt(value) -> str:
    return f"{value:.7g}" if isinstance(value, (float, np.floating)) else str(int(value))


MAX_RUNS = 8  # runs of indices a wrong buffer is described by
MAX_SUBSET_SUMS = 1 << 22  # float buffers: subsets of ranks x wrong elements matched at a time


def _held(got: np.ndarray, wide: list[np.ndarray], allowed, bad: np.ndarray) -> np.ndarray | None:
    """Per element, the ranks whose contributions it holds as a bit mask (-1: no set of ranks'
    elements at that index sums to it); a right element holds every rank's. int32 witnesses tell it
    from their low byte; a wrong float element is the set of ranks whose sum is closest to it,
    within the tolerance (an element near 0 fits with and without its rank: the closest decides)."""
    ranks = len(wide)
    if got.dtype.kind in "iu":
        if wide[0].dtype.kind not in "iu" or ranks > WITNESS_BITS:
            return None
        value = got.astype(np.int64)
        masks = value & 0xFF
        sums = sum(np.where((masks >> r) & 1, wide[r], 0) for r in range(ranks))
        return np.where((masks >> ranks == 0) & (value == sums), masks, -1)
    held = np.full(got.size, (1 << ranks) - 1)
    bits = ((np.arange(1 << ranks)[:, None] >> np.arange(ranks)) & 1).astype(np.float64)  # subset x rank
    wrong = np.flatnonzero(bad)
    step = max(1, MAX_SUBSET_SUMS >> ranks)
    for start in range(0, wrong.size, step):
        at = wrong[start:start + step]
        sums = bits @ np.stack([w[at] for w in wide])                                      # subset x element
        with np.errstate(invalid="ignore"):
            off = np.abs(sums - got[at].astype(np.float64))
        closest = np.argmin(np.where(np.isnan(off), np.inf, off), axis=0)
        fits = off[closest, np.arange(at.size)] <= (allowed[at] if np.ndim(allowed) else allowed)
        held[at] = np.where(fits, closest, -1)
    return held


def _contributions(got: np.ndarray, wide: list[np.ndarray], allowed, bad: np.ndarray, i: int) -> str:
    """Whose contributions the first wrong element holds, and, when the buffer falls into a few
    runs of indices holding the same ranks' (a ring's chunks), each run's."""
    held = _held(got, wide, allowed, bad)
    if held is None:
        return ""
    ranks = len(wide)
    first = int(held[i])
    if first < 0:
        note = (" (not the sum of some ranks' elements at this index: an element of another index, or a "
                "contribution added twice?)")
    elif first == 0:
        note = " (no rank's contribution at all: was this element ever written?)"
    else:
        have = _members(first, ranks)
        missing = [r for r in range(ranks) if r not in have]
        note = f" (it holds the contributions of {_ranks(have)} only: {_ranks(missing)} missing)"
    held = _chance_matches_dropped(held)
    starts = np.flatnonzero(np.diff(held)) + 1
    if not 0 < starts.size < MAX_RUNS:
        return note
    bounds = zip(np.concatenate([[0], starts]).tolist(), np.concatenate([starts, [got.size]]).tolist())
    return note + "; by index: " + "; ".join(f"{lo}..{hi - 1} {_run_holds(int(held[lo]), ranks)}"
                                             for lo, hi in bounds)


def _chance_matches_dropped(held: np.ndarray, shortest: int = 4) -> np.ndarray:
    """`held` with each run shorter than `shortest` that some ranks' sum fits, between runs no sum
    fits, taken as no sum too: with 8 float32 ranks some subset's sum matches a few elements of a
    buffer wrong everywhere by chance (the audit's "2819..2819 ranks 0, 2, 3, 4, 5, 6, 7")."""
    starts = np.flatnonzero(np.diff(held)) + 1
    los, his = np.concatenate([[0], starts]), np.concatenate([starts, [held.size]])
    if los.size < 2:
        return held
    out = held.copy()
    for k, (lo, hi) in enumerate(zip(los.tolist(), his.tolist())):
        if hi - lo < shortest and held[lo] >= 0 and (k == 0 or held[los[k - 1]] < 0) \
                and (k == los.size - 1 or held[los[k + 1]] < 0):
            out[lo:hi] = -1
    return out


def _members(mask: int, ranks: int) -> list[int]:
    return [r for r in range(ranks) if mask >> r & 1]


def _ranks(which: list[int]) -> str:
    return f"rank{'s' if len(which) > 1 else ''} {_names(which)}"


def _run_holds(mask: int, ranks: int) -> str:
    if mask < 0:
        return "not a sum of the ranks' elements there"
    have = _members(mask, ranks)
    if len(have) == ranks:
        return "every rank"
    if not have:
        return "no rank"
    return _ranks(have) + (" only" if len(have) == 1 else "")


def _names(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks))


# -- traffic ------------------------------------------------------------------------------------
_last_traffic: dict | None = None


def take_traffic() -> dict | None:
    """The traffic the current test counted last (for its result), and forget it."""
    global _last_traffic
    traffic, _last_traffic = _last_traffic, None
    return traffic


@dataclass
class Link:
    bytes: int = 0
    messages: int = 0
    largest: int = 0  # bytes of the largest message


@dataclass
class Traffic:
    """Copies of one call between the ranks (virtual devices 0..N-1), as the simulated GPUs saw them."""

    ranks: int
    links: dict[tuple[int, int], Link] = field(default_factory=dict)
    host_bytes: int = 0      # between host and GPUs, in both directions
    # (copy name, where the student's code issued it) of the first host copies that were the student's
    host_sites: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def of(cls, result, ranks: int, required: bool = True) -> "Traffic | None":
        """From a call's device report (on a GPU machine: the simulator's call beside it). Without
        one (`--simulator inline`, a debugging mode whose records are the student process's own):
        the test is not gradable, or None when not `required` (as the data flow is skipped there)."""
        proof = result.proof if getattr(result, "proof", None) is not None else result
        if proof.device is None and not required:
            return None
        _device_report(proof, "traffic between ranks is counted")
        traffic = cls(ranks)
        for op in proof.device.timeline:
            if op.kind != "copy":
                continue
            if HOST in (op.src, op.dst):
                traffic.host_bytes += op.nbytes
                if op.site and len(traffic.host_sites) < 3:  # (the grader's own uploads have no site of theirs)
                    traffic.host_sites.append((op.name, op.site))
            elif op.src != op.dst:
                link = traffic.links.setdefault((op.src, op.dst), Link())
                link.bytes += op.nbytes
                link.messages += 1
                link.largest = max(link.largest, op.nbytes)
        if proof.device.timeline_truncated:
            raise RuntimeError("the call issued more operations than the simulated GPUs log: traffic not counted")
        global _last_traffic
        _last_traffic = traffic.summary()
        return traffic

    def summary(self) -> dict:
        """As plain data, for the test's result (the feedback's table and ring diagram)."""
        return {"ranks": self.ranks, "host_bytes": self.host_bytes,
                "links": [[src, dst, link.bytes, link.messages] for (src, dst), link in sorted(self.links.items())]}

    def sent(self, rank: int) -> int:
        return sum(link.bytes for (src, _), link in self.links.items() if src == rank)

    def received(self, rank: int) -> int:
        return sum(link.bytes for (_, dst), link in self.links.items() if dst == rank)

    def messages_sent(self, rank: int) -> int:
        return sum(link.messages for (src, _), link in self.links.items() if src == rank)

    def messages_received(self, rank: int) -> int:
        return sum(link.messages for (_, dst), link in self.links.items() if dst == rank)

    @property
    def total(self) -> int:
        return sum(link.bytes for link in self.links.values())

    def table(self) -> str:
        """The per-link table the feedback shows."""
        rows = ["link        bytes      messages  largest"]
        for (src, dst), link in sorted(self.links.items()):
            rows.append(f"{src} -> {dst:<6} {link.bytes:>10,} {link.messages:>9}  {link.largest:>8,}")
        per_rank = ", ".join(f"{r}: {self.sent(r):,}/{self.received(r):,}" for r in range(self.ranks))
        rows.append(f"per rank (sent/received bytes): {per_rank}")
        return "\n".join(rows)


def _rounding(messages: int, ranks: int, itemsize: int) -> int:
    """Bytes a ring in pieces may move past `ring_bound`: an element per piece beyond the ring's
    2 (N - 1) messages (a piece rounds up by at most one; one piece a chunk is the ring's own cut)."""
    return max(0, messages - 2 * (ranks - 1)) * itemsize


def ring_bound(n: int, ranks: int, itemsize: int) -> int:
    """Bytes a ring all-reduce sends over each link (and each rank sends and receives):
    2 (N - 1) chunks of at most ceil(n / N) elements."""
    return 2 * (ranks - 1) * math.ceil(n / ranks) * itemsize


def expect_no_host_traffic(traffic: Traffic | None, buffer_bytes: int) -> None:
    """Only the grader's own upload and download of each rank's buffer cross the host link."""
    if traffic is None:
        return
    extra = traffic.host_bytes - 2 * traffic.ranks * buffer_bytes
    if extra > 0:
        # (the audit: a copy_to_host staged through the host was told only about kernels' arguments)
        where = " and ".join(f"the {name} {site}" for name, site in traffic.host_sites)
        raise PerformanceShortfall(
            f"{extra:,} bytes went between the host and the GPUs during the all-reduce (beyond the grader's "
            f"upload and download of each rank's buffer){f', among them {where}' if where else ''}. Keep the data "
            f"on the GPUs: ranks.copy(dst, src) moves it from rank to rank with no host in between, scratch memory "
            f"comes from r.device_array(...), and kernels take device arrays, not NumPy arrays")


def expect_total_traffic(traffic: Traffic, buffer_bytes: int) -> None:
    """At most 2 (N - 1) buffers between ranks in all (what reduce-then-broadcast needs)."""
    allowed = 2 * (traffic.ranks - 1) * buffer_bytes
    if traffic.total > allowed:
        raise PerformanceShortfall(f"{traffic.total:,} bytes between ranks; an all-reduce needs at most "
                                   f"2 (N - 1) buffers = {allowed:,}: something is sent more than once\n\n"
                                   f"{traffic.table()}")


def expect_ring_traffic(traffic: Traffic, n: int, itemsize: int, messages_per_link: int | None = None,
                        min_messages_per_link: int | None = None, largest_elements: int | None = None) -> None:
    """The ring's traffic: only links r -> r + 1 carry bytes; each link and each rank at most
    `ring_bound`; per link exactly `messages_per_link` messages (or at least
    `min_messages_per_link`), none larger than `largest_elements`."""
    count = traffic.ranks
    bound = ring_bound(n, count, itemsize)
    problems = []
    ring = {(r, (r + 1) % count) for r in range(count)}
    off_ring = sorted(k for k in traffic.links if k not in ring)
    backwards = False
    if off_ring:
        # (the audit: a consistent r -> r - 1 ring was told only as its links)
        backwards = set(off_ring) == {((r + 1) % count, r) for r in range(count)}
        # (the audit: an all-gather by direct sends listed 48 links at N = 8, and no cause)
        star = [r for r in range(count) if all((r, d) in traffic.links for d in range(count) if d != r)]
        why = (": the ring runs the other way (each rank sends to r.prev, not r.next)" if backwards else
               f": rank{'s' if len(star) > 1 else ''} {_names(star)} send{'' if len(star) > 1 else 's'} to every "
               f"other rank directly; in a ring each rank sends only to r.next, which passes on what it received "
               f"(in the all-gather, the chunk it got in the step before)" if star and count > 2 else "")
        named = (f"all {len(off_ring)} others" if star and len(star) == count > 2 else
                 ", ".join(f"{a} -> {b}" for a, b in off_ring))
        problems.append(f"bytes on links that are not the ring's (r -> r + 1): {named}{why}")
    # chunks cut into pieces: each piece may move one element across a chunk's bound (n = 1003 in 16
    # pieces of 63 or 62 makes chunks of 252, 252, 251 and 248 where ceil(n / N) is 251)
    for (src, dst), link in sorted(traffic.links.items()):
        allowed = bound + _rounding(link.messages, count, itemsize)
        if link.bytes > allowed:
            problems.append(f"link {src} -> {dst} carries {link.bytes:,} bytes; a ring needs at most {allowed:,} "
                            f"(2 (N - 1) chunks of ceil(n / N) elements)")
    for r in range(count):
        for what, moved, messages in (("sends", traffic.sent(r), traffic.messages_sent(r)),
                                      ("receives", traffic.received(r), traffic.messages_received(r))):
            allowed = bound + _rounding(messages, count, itemsize)
            if moved > allowed:
                problems.append(f"rank {r} {what} {moved:,} bytes; in a ring each rank {what} at most {allowed:,}")
    if n >= count and not backwards:  # (a ring run the other way leaves every link of r -> r + 1 empty: said)
        wrong: dict[str, list[str]] = {}  # what a ring link does wrong -> the links doing it (said once)
        for key in sorted(ring):
            link, name = traffic.links.get(key, Link()), f"{key[0]} -> {key[1]}"
            if messages_per_link is not None and link.messages != messages_per_link:
                wrong.setdefault(f"{link.messages} message(s); the ring sends exactly 2 (N - 1) = "
                                 f"{messages_per_link} over each link (one chunk per step)", []).append(name)
            if min_messages_per_link is not None and link.messages < min_messages_per_link:
                wrong.setdefault(f"{link.messages} message(s); pipelined, a link carries at least "
                                 f"{min_messages_per_link} (every chunk in pieces)", []).append(name)
            if largest_elements is not None and link.largest > largest_elements * itemsize:
                rule = (f"pipelined, no piece is larger than {largest_elements:,}" if min_messages_per_link is not None
                        else f"no chunk is larger than ceil(n / N) = {largest_elements:,} (chunks differ by at most "
                             f"one element: spread the remainder over the first ones)")
                wrong.setdefault(f"a message of {link.largest // itemsize:,} elements; {rule}", []).append(name)
        problems += [f"{_links(links, count)}: {what}" for what, links in wrong.items()]
    if problems:
        raise PerformanceShortfall("not a ring's traffic: " + problems[0] + "\n\n" + "\n".join(
            f"  - {p}" for p in problems) + f"\n\n{traffic.table()}")


def _links(names: list[str], count: int) -> str:
    if len(names) == count:
        return "every link of the ring"
    return ("link " if len(names) == 1 else "links ") + ", ".join(names)


def _device_report(proof, what: str) -> None:
    """Without the device process's report (`--simulator inline`, a debugging mode whose records
    are the student process's own) the test is not gradable here."""
    if proof.device is None:
        import pytest

        pytest.skip(f"{what} by the simulated GPUs' device process, and this run has none (--simulator inline)")


# -- the modelled timeline ------------------------------------------------------------------------
def timeline_of(result, gpu_key: str, buffer_bytes: int, model_bytes: int = MODEL_BUFFER_BYTES) -> Timeline:
    """The call's modelled timeline on `gpu_key`, as on a buffer of `model_bytes` (the call ran
    on `buffer_bytes`)."""
    proof = result.proof if getattr(result, "proof", None) is not None else result
    _device_report(proof, "the timeline of a call is recorded")
    ops = [op.as_dict() for op in proof.device.timeline]
    timeline = schedule(ops, proof.launches, perf_model.gpu(gpu_key), scale=model_bytes / max(buffer_bytes, 1))
    return replace(timeline, buffer_bytes=model_bytes)


def expect_pipelined(stage, mine: Timeline, reference: Timeline, max_waits: int = 1) -> dict:
    """Stage 3's timeline: at most `max_waits` host waits between the first and the last copy,
    copies and adds overlapping, and the modelled time against the reference's (the stage's `gpu`
    threshold: full credit up to max_time_ratio, linear down to zero)."""
    start = min((s.start_s for s in mine.spans), default=0.0)
    ranks = len({s.device for s in mine.spans if s.kind == "kernel" or s.peer}) or 1
    g = perf_model.gpu(stage.gpu.model_gpu)
    size = _modelled_bytes(mine)
    busbw = modelled_busbw(mine, ranks)
    summary = {"source": "modelled", "gpu": stage.gpu.model_gpu, "seconds": mine.makespan_s,
               "bound": "copies" if mine.busy_s("copy") >= mine.busy_s("kernel") else "adds",
               "global_bytes": size * 2 * (ranks - 1) / ranks, "busbw_gbs": round(busbw / 1e9, 2),
               "bandwidth_fraction": round(busbw / (g.peer_bandwidth_gbs * 1e9), 4),
               "reference_seconds": reference.makespan_s, "overlap_seconds": mine.overlap_s(),
               "reference_overlap_seconds": reference.overlap_s(), "host_waits": mine.waits_between_copies,
               "buffer_bytes": size,
               # the feedback's picture: kernels and GPU-to-GPU copies per stream, in microseconds
               "spans": [[s.kind, s.device, s.stream, round((s.start_s - start) * 1e6, 2),
                          round((s.end_s - start) * 1e6, 2)] for s in mine.spans
                         if s.kind == "kernel" or s.peer][:MAX_SPANS]}
    keep_timing(summary)
    if mine.waits_between_copies > max_waits:
        raise PerformanceShortfall(
            f"the host stopped to wait {mine.waits_between_copies} times between the first and the last copy (allowed: "
            f"{max_waits}): a synchronous ranks.copy, ranks.synchronize(), stream.synchronize() or "
            f"cuda.synchronize() inside the loop stops every rank; order the work with events instead "
            f"(e.record(stream); e.wait(other_stream))")
    if mine.overlap_s() <= 0.0:
        raise PerformanceShortfall("on the modelled timeline no add ever runs while a copy is in flight: copy on a "
                                   "stream of its own (r.new_stream()) and add on r.stream, so that slice k + 1 "
                                   "travels while slice k is added")
    ratio = mine.makespan_s / reference.makespan_s if reference.makespan_s > 0 else 1.0
    credit = stage.gpu.credit(ratio)
    summary.update(ratio=round(ratio, 4), credit=credit, max_time_ratio=stage.gpu.max_time_ratio)
    if credit < 1:
        raise PartialCredit(
            f"slower than the reference: modelled on {stage.gpu.model_gpu}s with a "
            f"{size_text(size)} buffer, {mine.makespan_s * 1e6:.0f} us against the reference's "
            f"{reference.makespan_s * 1e6:.0f} us ({ratio:.2f}x; full credit up to {stage.gpu.max_time_ratio:g}x); "
            f"{_what_bounds(mine, reference, g)}; {credit:.0%} of the points", credit)
    return summary


def _what_bounds(mine: Timeline, reference: Timeline, g) -> str:
    """Why a pipelined timeline is slow: the host issuing more operations than the reference (each
    `host_issue_us`, one after another, every rank's), or copies and adds overlapping less."""
    ops, theirs = len(mine.spans), len(reference.spans)
    if mine.host_bound and ops > theirs:
        return (f"host-bound: the host issues {ops} copies and kernels one after another, about "
                f"{g.host_issue_us:g} us each from Python, and the GPUs wait for it (the reference issues {theirs}): "
                f"fewer, larger pieces keep the links busier than more, smaller ones")
    slow_adds = _slow_adds(mine, reference)
    if slow_adds:
        return slow_adds
    if mine.overlap_s() < reference.overlap_s():
        return (f"copies and adds overlap {mine.overlap_s() * 1e6:.0f} us (the reference's: "
                f"{reference.overlap_s() * 1e6:.0f} us): while slice k is added, slice k + 1 should already be on "
                f"the wire; {_why_less_overlap(mine, reference)}")
    return (f"copies and adds overlap {mine.overlap_s() * 1e6:.0f} us (the reference's: "
            f"{reference.overlap_s() * 1e6:.0f} us)")


def _slow_adds(mine: Timeline, reference: Timeline, factor: float = 1.5) -> str:
    """Where the adds themselves take `factor` times the reference's kernel time in all (the same
    elements added, in whatever pieces): the kernel, by its slowest launch's line (the audit: a
    grid-stride add on 32 blocks, told only its overlap); "" where they do not."""
    kernels = [s for s in mine.spans if s.kind == "kernel"]
    ours, theirs = (sum(s.end_s - s.start_s for s in t.spans if s.kind == "kernel") for t in (mine, reference))
    if not kernels or theirs <= 0 or ours < factor * theirs:
        return ""
    slowest = max(kernels, key=lambda s: s.end_s - s.start_s)
    return (f"its adds run {ours * 1e6:,.0f} us of kernel time in all, {ours / theirs:.1f}x the reference's "
            f"{theirs * 1e6:,.0f} us for the same elements: kernel {slowest.name!r}"
            f"{f' (launched {slowest.site})' if slowest.site else ''} is the slow part; a launch with a block of "
            f"threads per 256 or so elements of its piece fills the GPU, a fixed few blocks (32, with a grid-stride "
            f"loop) do not")


def _why_less_overlap(mine: Timeline, reference: Timeline) -> str:
    """What keeps a pipelined ring's copies from running beside its adds, from its timeline: adds
    or copies on the legacy default stream, copies and adds on one stream, fewer pieces than the
    reference's; else the usual causes the timeline cannot tell apart."""
    for ours, what, fix in ((lambda s: s.kind == "kernel", "adds", "launch them on r.stream"),
                            (lambda s: s.peer, "copies", "issue them on a stream of their own (r.new_stream())")):
        if any(s.default and ours(s) for s in mine.spans):
            return (f"its {what} run on a GPU's legacy default stream (issued with no stream), which waits for every "
                    f"other stream of its GPU, and they for it, so nothing runs beside them: {fix}")
    kernels = {(s.device, s.stream) for s in mine.spans if s.kind == "kernel"}
    shared = sorted({(s.device, s.stream) for s in mine.spans if s.peer} & kernels)
    if shared:
        device, stream = shared[0]
        more = f" and {len(shared) - 1} more" if len(shared) > 1 else ""
        on_it = [s for s in mine.spans if (s.device, s.stream) == (device, stream) and s.site]
        copy = next((s for s in on_it if s.peer), None)
        add = next((s for s in on_it if s.kind == "kernel"), None)
        sites = "".join(f", the {what} issued {s.site}" for what, s in (("copies", copy), ("adds", add)) if s)
        return (f"its copies and adds are issued on one stream (stream {stream} of device {device}{more}{sites}), "
                f"which runs them one after another: copy on a stream of its own (r.new_stream()) and add on "
                f"r.stream, ordered by events")
    pieces, theirs = (sum(1 for s in t.spans if s.peer) for t in (mine, reference))
    if pieces < theirs:
        return (f"it sends {pieces} pieces where the reference sends {theirs}: with fewer, a copy waits for the add "
                f"of the piece before it, and the link idles (cut each chunk into SLICES pieces)")
    return ("a copy that waits for the add before it leaves the link idle: one scratch buffer per rank (a piece "
            "cannot land until the add has read the one before), or copies issued in an order that queues one "
            "behind a copy still waiting for its add (a stream runs its work in issue order: issue each step's "
            "pieces in turn)")


# -- against NCCL ------------------------------------------------------------------------------------
def modelled_busbw(timeline: Timeline, ranks: int) -> float:
    """nccl-tests' bus bandwidth (bytes/s) of a modelled timeline, as on the buffer it is modelled
    on: algbw = S / t, busbw = algbw x 2 (N - 1) / N (the links' own rate)."""
    if timeline.makespan_s <= 0:
        return 0.0
    return _modelled_bytes(timeline) / timeline.makespan_s * 2 * (ranks - 1) / ranks


def _modelled_bytes(timeline: Timeline) -> int:
    """The buffer a timeline is modelled as on (`timeline_of` says; MODEL_BUFFER_BYTES where none did)."""
    return timeline.buffer_bytes or MODEL_BUFFER_BYTES


def size_text(nbytes: int) -> str:
    """64 MiB, 1 GiB."""
    return f"{nbytes >> 30} GiB" if nbytes >= 1 << 30 and nbytes % (1 << 30) == 0 else f"{nbytes >> 20} MiB"


def modelled_nccl_busbw(gpu_key: str) -> float:
    """NCCL's all-reduce busbw on the preset, as the model takes it: a fraction of one peer link's
    bandwidth (gpus.toml `nccl_busbw_fraction`; measured by benchmarks/allreduce_gpus.py)."""
    g = perf_model.gpu(gpu_key)
    return g.nccl_busbw_fraction * g.peer_bandwidth_gbs * 1e9


def expect_busbw(mine: float, nccl: float, full_ratio: float, how: str, gpu: str, ranks: int,
                 nbytes: int = MODEL_BUFFER_BYTES, model: dict | None = None,
                 believed_up_to: float | None = None) -> dict:
    """The student's busbw (bytes/s) against NCCL's: full credit from `full_ratio` of it, linear
    down to none at half that. `how`: "modelled on H100s, 64 MiB" or "measured on 4 GPUs".
    Measured: `model`, the model's prediction for the same call (`model_beside_allreduce`), is
    reported beside it; `believed_up_to` bounds a busbw the student's own runner reported."""
    ratio = mine / nccl if nccl > 0 else 0.0
    if how.startswith("measured") and ratio > FORGED_RATIO:
        from ..errors import RunnerError  # times from the student's own process: a floor, as for kernels

        raise RunnerError(f"the runner's all-reduce times give {ratio:.1f}x NCCL's bus bandwidth on the same GPUs: "
                          f"not plausible (a forged timing)")
    measured, capped = mine, believed_up_to is not None and mine > believed_up_to
    if capped:
        mine = believed_up_to
        ratio = mine / nccl if nccl > 0 else 0.0
    credit = 1.0 if ratio >= full_ratio else max(0.0, round((ratio - full_ratio / 2) / (full_ratio / 2), 3))
    bus_bytes = nbytes * 2 * (ranks - 1) / ranks
    summary = {"source": how.split()[0], "gpu": gpu, "seconds": bus_bytes / mine if mine > 0 else float("inf"),
               "reference_seconds": bus_bytes / nccl if nccl > 0 else 0.0, "baseline": "NCCL",
               "ratio": round(1 / ratio, 4) if ratio > 0 else float("inf"), "bound": "links",
               "global_bytes": bus_bytes, "bandwidth_fraction": round(ratio, 4),
               "busbw_gbs": round(mine / 1e9, 2), "nccl_busbw_gbs": round(nccl / 1e9, 2),
               "ratio_to_nccl": round(ratio, 4), "full_ratio": full_ratio, "credit": credit}
    if model:
        summary["model"] = model
    if capped:
        summary["measured_busbw_gbs"] = round(measured / 1e9, 2)
    keep_timing(summary)
    sentence = (f"busbw {mine / 1e9:.0f} GB/s ({how}) against NCCL's {nccl / 1e9:.0f} GB/s: {ratio:.2f}x "
                f"(full credit from {full_ratio:g}x)")
    if capped:
        sentence += (f"; your runner measured {measured / 1e9:.0f} GB/s, more than the simulator's record of the "
                     f"same call allows (the reference's measured busbw times the modelled ratio of yours to the "
                     f"reference's, times {MODEL_SLACK:g}), so it is graded at that")
    if model:
        sentence += f"; the performance model predicted {model['ratio_to_nccl']:.2f}x NCCL's on {model['gpu']}"
    if credit <= 0:
        raise PerformanceShortfall(f"far slower than NCCL: {sentence}")
    if credit < 1:
        raise PartialCredit(f"slower than NCCL allows for full credit: {sentence}; {credit:.0%} of the points", credit)
    return summary


def model_beside_allreduce(mine, reference, buffer_bytes: int, ranks: int, device_name: str, model_gpu: str,
                           measured_bytes: int = MODEL_BUFFER_BYTES) -> dict:
    """The model's prediction for an all-reduce measured on GPUs named `device_name` on buffers of
    `measured_bytes`, from the simulator's record of the same call (`mine`, a call's result, on
    buffers of `buffer_bytes`) and of the reference's on the same inputs, scheduled on the preset
    of those GPUs (`model_gpu` where none matches): busbw of each and the student's against
    modelled NCCL, to set beside the measurement."""
    gpu_key = (perf_model.preset_for(device_name) or perf_model.gpu(model_gpu)).key
    mine_bw = modelled_busbw(timeline_of(mine, gpu_key, buffer_bytes, measured_bytes), ranks)
    reference_bw = modelled_busbw(timeline_of(reference, gpu_key, buffer_bytes, measured_bytes), ranks)
    nccl = modelled_nccl_busbw(gpu_key)
    return {"gpu": gpu_key, "busbw_gbs": round(mine_bw / 1e9, 2), "reference_busbw_gbs": round(reference_bw / 1e9, 2),
            "ratio": round(nccl / mine_bw, 4) if mine_bw > 0 else float("inf"),
            "ratio_to_nccl": round(mine_bw / nccl, 4) if nccl > 0 else 0.0}


def believed_busbw(model: dict, reference_measured: float) -> float:
    """The most a busbw measured in the student's own runner is believed (bytes/s): the
    reference's busbw, measured in its trusted runner in the same run, times the modelled ratio
    of the student's call to the reference's, times MODEL_SLACK. Bounded from the judge's side by
    records the student's process cannot touch (the simulated GPUs' and the trusted runner's)."""
    if model["reference_busbw_gbs"] <= 0:
        return 0.0
    return reference_measured * model["busbw_gbs"] / model["reference_busbw_gbs"] * MODEL_SLACK


__all__ = ["MODEL_BUFFER_BYTES", "PIPELINE_BUFFER_BYTES", "size_text",
           "Link", "Traffic", "take_traffic", "expect_allreduced", "expect_no_host_traffic",
           "believed_busbw", "expect_busbw", "expect_pipelined", "expect_ring_traffic", "modelled_busbw", "modelled_nccl_busbw", "expect_total_traffic", "model_beside_allreduce", "rank_inputs", "ring_bound",
           "timeline_of"]
