"""`ranks`: what the all-reduce exercise hands the student's function, `f(ranks, bufs)`.

numba-cuda has every per-device primitive an all-reduce needs, and the student uses them as they
are: `with cuda.gpus[i]:`, streams, events, device arrays, kernels. It has no notion of N ranks on
fewer GPUs, no copy between ranks that anyone counts per link, and no per-rank streams; this object
is that and nothing more (student code may not import the grader, so it is handed in):

- `len(ranks)`, `ranks[i]`, iteration, `r.id`, `r.next`, `r.prev`: the ring's order;
- `with r:` makes rank r's GPU current (`cuda.gpus[d]`; on one GPU emulating N ranks there is no
  `cuda.gpus[r]` to use) and names r as the rank whose kernels are launched;
- `r.stream`, `r.new_stream()`, `r.event()`: streams and events made on r's GPU: distinct per
  rank even when the ranks share a GPU (plain numba: `with r: cuda.stream()`, here for brevity);
- `r.device_array(shape, dtype)`: memory owned by rank r (ownership of N ranks on one GPU has to be
  recorded somewhere: here);
- `ranks.copy(dst, src, stream=None)`: the only way data crosses ranks, counted per link.
  `stream=None`: synchronous, after all the queued work of both ranks and before any later work.
  With a stream (of either rank): asynchronous, ordered only after that stream's earlier work;
  order it after the producer with `e = src_rank.event(); e.record(src_rank.stream); e.wait(stream)`;
- `ranks.synchronize()`: wait for every rank.

How ranks map onto the machine, with the same student code: on the simulator rank r is virtual
device r (the device process counts every copy per link, in a process the student's code cannot
reach); on N GPUs rank r is GPU r, peer access enabled between ring neighbours; on fewer GPUs than
ranks, every rank lives on GPU 0 with streams of its own. Nothing kept here is the grade (the
simulator's report is).
"""

from __future__ import annotations

import bisect
import threading

MAX_RANKS = 8  # the simulator's virtual devices: the grading tests use 2, 3, 4 and 8 ranks


def _address(array) -> tuple[int, int]:
    """[start, end) of the bytes a device array's view spans (its CUDA array interface; numba's
    stock simulator's arrays have none: their host memory's addresses stand in)."""
    face = getattr(array, "__cuda_array_interface__", None) or getattr(array, "_ary").__array_interface__
    start = int(face["data"][0])
    itemsize = array.dtype.itemsize
    strides = face.get("strides") or None
    shape = tuple(face["shape"])
    if not shape or 0 in shape:
        return start, start
    if strides is None:
        size = 1
        for n in shape:
            size *= n
        return start, start + size * itemsize
    lo = hi = start
    for n, stride in zip(shape, strides):
        reach = (n - 1) * stride
        lo, hi = lo + min(0, reach), hi + max(0, reach)
    return lo, hi + itemsize


class Rank:
    """One rank of the ring (see the module docstring)."""

    def __init__(self, ranks: "Ranks", ident: int, device: int):
        self._ranks = ranks
        self.id = ident
        self.device = device  # the GPU (or virtual device) this rank lives on
        self._streams: list = []
        self.stream = self.new_stream()
        if hasattr(self.stream, "name_as"):  # the simulator's: its messages say which stream this is
            self.stream.name_as(f"r.stream of rank {ident}")

    @property
    def next(self) -> "Rank":
        return self._ranks[(self.id + 1) % len(self._ranks)]

    @property
    def prev(self) -> "Rank":
        return self._ranks[(self.id - 1) % len(self._ranks)]

    def _gpu(self):
        return self._ranks.cuda.gpus[self.device]

    def __enter__(self) -> "Rank":
        self._gpu().__enter__()
        self._ranks._active().append(self)
        return self

    def __exit__(self, *exc) -> bool:
        self._ranks._active().pop()
        self._gpu().__exit__(*exc)
        return False

    def new_stream(self):
        """A new stream on this rank's GPU."""
        with self._gpu():
            stream = self._ranks.cuda.stream()
        self._streams.append(stream)
        self._ranks._stream_owner[id(stream)] = self
        return stream

    def event(self):
        """An event made on this rank's GPU (CUDA records an event only on its own GPU's streams)."""
        with self._gpu():
            return self._ranks.cuda.event()

    def device_array(self, shape, dtype):
        """Uninitialised device memory owned by this rank."""
        with self._gpu():
            array = self._ranks.cuda.device_array(shape, dtype)
        self._ranks._own(array, self)
        return array

    def synchronize(self) -> None:
        for stream in self._streams:
            stream.synchronize()

    def __repr__(self) -> str:
        return f"<rank {self.id} of {len(self._ranks)} on device {self.device}>"


class Ranks:
    """N ranks in a ring (see the module docstring)."""

    def __init__(self, count: int, devices: list[int], cuda_module=None, enable_peer_access: bool = False):
        if not 1 <= count <= MAX_RANKS * 16 or len(devices) != count:
            raise ValueError(f"{count} ranks on devices {devices}")
        if cuda_module is None:
            from numba import cuda as cuda_module
        self.cuda = cuda_module
        self._starts: list[int] = []          # owned memory, sorted by start address
        self._spans: list[tuple[int, int, Rank]] = []
        self._stream_owner: dict[int, Rank] = {}
        self._local = threading.local()
        self._ranks = [Rank(self, r, d) for r, d in enumerate(devices)]
        self.emulated = len(set(devices)) < count  # several ranks share a GPU
        if enable_peer_access and not self.emulated:
            self._enable_peer_access()

    # -- the ring -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ranks)

    def __getitem__(self, i: int) -> Rank:
        return self._ranks[i]

    def __iter__(self):
        return iter(self._ranks)

    def __repr__(self) -> str:
        return f"<{len(self)} ranks{' on one GPU' if self.emulated else ''}>"

    # -- memory and who owns it -----------------------------------------------------------------
    def _own(self, array, rank: Rank) -> None:
        start, end = _address(array)
        i = bisect.bisect(self._starts, start)
        self._starts.insert(i, start)
        self._spans.insert(i, (start, end, rank))

    def owner(self, array) -> Rank | None:
        """The rank whose memory `array` (or a slice of it) is, or None."""
        if not (hasattr(array, "__cuda_array_interface__") or hasattr(array, "_ary")):
            return None
        span = self._span(array)
        return span[2] if span is not None else None

    def _span(self, array) -> tuple[int, int, Rank] | None:
        """The owned allocation `array` lies in: ([start, end) of its bytes, its rank), or None."""
        start, end = _address(array)
        i = bisect.bisect(self._starts, start) - 1
        if i >= 0:
            lo, hi, rank = self._spans[i]
            if lo <= start and (end <= hi or end == start):
                return lo, hi, rank
        return None

    def upload(self, host_arrays: list) -> list:
        """Each rank's buffer: host array r copied to rank r (the grader's, before the call)."""
        bufs = []
        for rank, host in zip(self._ranks, host_arrays):
            with rank._gpu():
                array = self.cuda.to_device(host)
            self._own(array, rank)
            bufs.append(array)
        return bufs

    # -- communication --------------------------------------------------------------------------
    def copy(self, dst, src, stream=None) -> None:
        """Copy rank memory `src` into rank memory `dst` (same shape and dtype): the one way data
        crosses ranks. `stream=None`: synchronous. A stream of either rank: asynchronous on it."""
        to, frm = self.owner(dst), self.owner(src)
        for what, array, rank in (("dst", dst, to), ("src", src, frm)):
            if rank is None:
                raise ValueError(f"ranks.copy: {what} is not memory of a rank: use the buffers you were given, "
                                 f"slices of them, or arrays from r.device_array(...) (in a script of your own, "
                                 f"bufs = ranks.upload(host_arrays) gives each rank its buffer)")
        if dst.shape != src.shape or dst.dtype != src.dtype:
            raise ValueError(f"ranks.copy: dst is {dst.dtype}{list(dst.shape)} and src is "
                             f"{src.dtype}{list(src.shape)}; they must match (slice both the same)"
                             f"{self._cut_short(dst, src)}")
        if stream is None:
            for rank in {frm.id: frm, to.id: to}.values():  # everything queued on both ranks first
                rank.synchronize()
            with to:
                dst.copy_to_device(src)
                self.cuda.synchronize()  # and nothing later starts before it is done
        else:
            owner = self._stream_owner.get(id(stream))
            if owner is None or owner not in (to, frm):
                # (the audit: cuda.default_stream() or a cuda.stream() of the student's own was told only the rule)
                given = (f"; that stream is rank {owner.id}'s, which this copy does not touch" if owner is not None
                         else "; that stream is no rank's (cuda.stream() and cuda.default_stream() make none): "
                              "stream=None copies synchronously")
                raise ValueError(f"ranks.copy: the stream must be one of rank {frm.id}'s or rank {to.id}'s "
                                 f"(r.stream or r.new_stream()){given}")
            with owner:
                dst.copy_to_device(src, stream=stream)

    def _cut_short(self, dst, src) -> str:
        """Where `dst` is smaller than `src` because a slice of it stopped at its array's end (a
        scratch array too small for the largest chunk: `scratch[:253]` of 250 elements is 250)."""
        if dst.dtype != src.dtype or dst.ndim != 1 or src.ndim != 1 or dst.size >= src.size:
            return ""
        span = self._span(dst)
        if span is None or span[1] != _address(dst)[1]:
            return ""
        size = (span[1] - span[0]) // dst.dtype.itemsize
        return (f": dst stops where its array does, an array of {size:,} element{'s' if size != 1 else ''}, so a "
                f"slice of it cannot hold {src.size:,}: is that array large enough for the largest chunk?")

    def synchronize(self) -> None:
        """Wait for all the work of every rank."""
        for rank in self._ranks:
            rank.synchronize()
        for device in sorted({r.device for r in self._ranks}):
            with self.cuda.gpus[device]:
                self.cuda.synchronize()

    # -- the launching rank ---------------------------------------------------------------------
    def _active(self) -> list:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    @property
    def current(self) -> Rank | None:
        """The rank of the innermost `with r:` of this host thread, or None."""
        stack = self._active()
        return stack[-1] if stack else None

    def _enable_peer_access(self) -> None:
        """On N GPUs: peer access between ring neighbours, both ways, where the hardware allows
        (without it a copy between GPUs is staged through the host)."""
        for rank in self._ranks:
            for peer in {rank.next.device, rank.prev.device} - {rank.device}:
                with rank._gpu():
                    context = self.cuda.current_context()
                    try:
                        if context.can_access_peer(peer):
                            context.enable_peer_access(self.cuda.gpus[peer].get_primary_context().handle)
                    except Exception:  # noqa: BLE001 - already enabled, or not possible: copies are staged
                        pass


def devices_for(count: int, available: int) -> list[int]:
    """Rank r on device r when there are enough devices, else every rank on device 0."""
    return list(range(count)) if available >= count else [0] * count


def for_script(count: int) -> Ranks:
    """`grader.ranks(count)`: `count` ranks on this process's GPUs (simulated ones under `gpugrade run
    --devices N`), as the runner would hand them to `f(ranks, bufs)`: for trying an all-reduce by hand
    (`bufs = ranks.upload(host_arrays)`, one per rank, then `f(ranks, bufs)`)."""
    from numba import cuda

    return Ranks(count, devices_for(count, len(cuda.gpus)), enable_peer_access=True)


__all__ = ["MAX_RANKS", "Rank", "Ranks", "devices_for", "for_script"]
