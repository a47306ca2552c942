"""`Instrument`: the per-launch memory checkers and counters that both executors call.

Lanes arrive as int64 vectors (`block`: linear block id, `thread`: linear thread id in the
block); the per-thread executor uses the scalar twins `index1` / `access1`, which apply the same
rules to one lane without numpy overhead.

Race model (one shadow record per element of each allocation, reset every launch): the last
writer (global thread id, its block's barrier epoch, its warp's syncwarp epoch, atomic or not,
its threadfence count) and the last reader (or "several readers" of one block epoch). Two
accesses conflict when they come from different threads, at least one writes, they are not both
atomic, and nothing orders them: the same block with a barrier in between, the same warp with a
syncwarp in between, or (a write read by another block) a threadfence by the writer after it
and, on the reader's side, a global atomic by the reading thread, or by a thread of its block
before a barrier the reader passed (the "last block" pattern: write, fence, atomic counter; the
block that sees the count reads). Blocks are not ordered on a GPU: a fence alone orders nothing,
so a read of another block's fenced write with no acquire is a race even though the simulator
happens to run that block first.

Silent stores: a plain store of the bits its element already holds (bitwise: -0.0 over 0.0, or
another NaN payload, is a change; an element never written since allocation holds garbage and
is never silent) changes nothing a thread can observe, so it is no access for the race rule: it
conflicts with no load and no store, and the shadow stays as it was (the previous writer stays
the last writer). Counters and initialised flags count it as any store. Executors pass what
they store (`access(..., values=)`, `access1(..., value=)`, the store recorders' `value`); the
comparison runs only with the race checker on. Lanes of one store instruction on one element
count as sequential stores: storing one value, the first changes the element and the others are
silent; storing different values is a race. The rule judges silence against memory at the
simulated moment, so it can hide a race that another interleaving would expose: a silent store
unordered with the element's last writer (it could land first, changing what earlier loads
see), or a later store of another value ordered after the last writer but not after the silent
store (the silent store could land after it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import (Checks, OutOfBoundsError, RaceError, UninitialisedReadError, SimError,
                     where)

SECTOR_BYTES = 32
BANKS = 32
BANK_BYTES = 4
WARP = 32
_CODES = (("global", "load"), ("global", "store"), ("shared", "load"), ("shared", "store"))
_CODE = {sk: i for i, sk in enumerate(_CODES)}


@dataclass(frozen=True)
class LaunchConfig:
    """A validated launch configuration (3-tuples, x first)."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0
    stream: object = 0
    device: int = 0

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def n_blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def warps_per_block(self) -> int:
        return (self.threads_per_block + WARP - 1) // WARP

    def block_xyz(self, b: int) -> tuple[int, int, int]:
        gx, gy, _ = self.grid
        return (b % gx, b // gx % gy, b // (gx * gy))

    def thread_xyz(self, t: int) -> tuple[int, int, int]:
        bx, by, _ = self.block
        return (t % bx, t // bx % by, t // (bx * by))


class SharedArray:
    """A `cuda.shared.array` of a batch of blocks: `flat` holds `n_blocks` consecutive copies.

    It has the attributes of `host.DeviceBuffer` the instrument reads (flat, initialised, offset,
    estrides, shape, dtype, buffer_id, address, name) plus the block batch it covers.
    """

    _ids = iter(range(-1, -(1 << 62), -1))  # negative: never collides with allocation ids

    def __init__(self, name: str, shape: tuple[int, ...], dtype, first_block: int = 0,
                 n_blocks: int = 1, address: int = 0, flat: np.ndarray | None = None):
        self.name, self.shape, self.dtype = name, tuple(shape), np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.first_block, self.n_blocks = first_block, n_blocks
        self.block_stride = self.size
        self.flat = flat if flat is not None else \
            np.full(self.size * n_blocks * self.dtype.itemsize, 0xFF, np.uint8).view(self.dtype)
        self.initialised = np.zeros(self.size * n_blocks, bool)
        self.offset = 0
        self.estrides = tuple(int(s) for s in np.cumprod((1,) + self.shape[:0:-1])[::-1])
        self.address = address  # byte offset of element 0 in the block's shared memory
        self.buffer_id = next(SharedArray._ids)
        self.device = None

    def block_view(self, block: int) -> np.ndarray:
        """The ndarray of one block (for executors that index it directly)."""
        start = (block - self.first_block) * self.size
        return self.flat[start:start + self.size].reshape(self.shape)


class LocalArray:
    """A `cuda.local.array` of one thread (bounds-checked, not counted)."""

    def __init__(self, name: str, shape, dtype):
        self.name, self.shape, self.dtype = name, tuple(shape), np.dtype(dtype)
        self.flat = np.zeros(int(np.prod(self.shape, dtype=np.int64)), self.dtype)
        self.offset = 0
        self.estrides = tuple(int(s) for s in np.cumprod((1,) + self.shape[:0:-1])[::-1])
        self.buffer_id = 0


class Lanes:
    """The lanes of one vector access and their warp geometry, computed once per set of active
    lanes (the SIMT executor keeps one per mask and passes it along).

    `block`, `thread`: int64 vectors; `act`: the lanes' positions in the executor's full lane
    vectors (None: all of them). `g`: global thread ids; `warp`: global warp ids; `ordered`: g
    strictly increasing (then each warp is one run of lanes, starting at `starts`); `g0`: the
    first id when the ids are also consecutive; `rows`: every run is a whole warp of 32 lanes.
    """

    __slots__ = ("block", "thread", "act", "n", "g", "warp", "ordered", "starts", "n_req", "g0",
                 "rows", "ridx", "blkoff", "ep_ver", "ep", "wep", "neg_block")

    def __init__(self, block, thread, tpb: int, wpb: int, act=None):
        block = np.asarray(block, np.int64)
        thread = np.broadcast_to(np.asarray(thread, np.int64), block.shape)
        self.block, self.thread, self.act = block, thread, act
        n = self.n = block.shape[0]
        g = self.g = block * tpb + thread
        self.warp = w = block * wpb + (thread >> _WARP_SHIFT)  # thread // WARP
        self.ordered = n <= 1 or bool((g[1:] > g[:-1]).all())
        self.g0 = int(g[0]) if self.ordered and n and int(g[-1]) - int(g[0]) == n - 1 else None
        if self.ordered:
            self.starts = np.flatnonzero(w[1:] != w[:-1]) + 1 if n else np.zeros(0, np.int64)
            self.starts = np.concatenate((np.zeros(min(n, 1), np.int64), self.starts))
            self.n_req = int(self.starts.shape[0])
        else:
            self.starts = None
            self.n_req = int(np.unique(w).shape[0])
        self.rows = self.ordered and n == WARP * self.n_req
        self.ridx = None  # request number of each lane (ordered lanes), made when needed
        self.blkoff: dict = {}  # (first_block, block_stride) -> offset of each lane's block copy
        self.ep_ver, self.ep, self.wep = -1, None, None  # epochs (Instrument._lane_epochs)
        self.neg_block = None  # -block - 2: "several readers of this block" in the race shadow

    def request_index(self) -> np.ndarray:
        if self.ridx is None:
            lengths = np.diff(np.append(self.starts, self.n))
            self.ridx = np.repeat(np.arange(self.n_req, dtype=np.int64), lengths)
        return self.ridx

    def block_offset(self, handle) -> np.ndarray:
        key = (handle.first_block, handle.block_stride)
        off = self.blkoff.get(key)
        if off is None:
            off = self.blkoff[key] = (self.block - handle.first_block) * handle.block_stride
        return off


class _Pattern:
    """An access pattern seen before: the vector part of the flat positions (the lanes' index
    vectors, bounds-checked once; scalar index parts are added per access) and its counters per
    alignment class."""

    __slots__ = ("refs", "vec_flat", "vec_within", "counted", "dups", "scalars", "nonneg",
                 "squeezed")

    def __init__(self, refs, vec_flat, vec_within, scalars=()):
        self.refs, self.vec_flat, self.vec_within = refs, vec_flat, vec_within
        self.counted: dict = {}
        self.dups = None  # Instrument._dups
        self.scalars = scalars  # (position in the index, dimension, stride) of each scalar part
        self.nonneg = False  # every vec_flat entry >= 0 (no negative stride)
        self.squeezed = None  # _squeeze(vec_flat), made on the pattern's first reuse


_PATTERNS = 32  # patterns kept per launch (each holds a few vectors over the lanes)
# index dtype -> (unsigned view, largest dimension for which negative values still fail the
# unsigned comparison `i >= dim`)
_UNSIGNED = {np.dtype(t): (np.dtype(u), limit) for t, u, limit in (
    (np.int64, np.uint64, 1 << 63), (np.int32, np.uint32, 1 << 31), (np.int16, np.uint16, 1 << 15),
    (np.int8, np.uint8, 1 << 7), (np.uint32, np.uint32, 1 << 64), (np.uint16, np.uint16, 1 << 64),
    (np.uint8, np.uint8, 1 << 64))}


class _Shadow:
    """Race shadow of one allocation for one launch."""

    __slots__ = ("w_thr", "w_ep", "w_wep", "w_atomic", "w_fence", "r_thr", "r_ep", "r_wep",
                 "written", "read", "atomic")

    def __init__(self, n: int):
        # vector path: has anything been written / read / written by an atomic (while not,
        # the matching arrays still hold their initial values and need not be consulted)
        self.written = self.read = self.atomic = False
        self.w_thr = np.full(n, -1, np.int64)
        self.w_ep = np.zeros(n, np.int64)
        self.w_wep = np.zeros(n, np.int64)
        self.w_atomic = np.zeros(n, bool)
        self.w_fence = np.zeros(n, np.int64)
        self.r_thr = np.full(n, -1, np.int64)  # -1 none, >= 0 thread, <= -2: several of block -r-2
        self.r_ep = np.zeros(n, np.int64)
        self.r_wep = np.zeros(n, np.int64)


class Instrument:
    """Checkers and counters of one launch. See docs/SIMULATOR_DESIGN.md for the contract."""

    def __init__(self, kernel_name: str, filename: str, config: LaunchConfig,
                 checks: Checks | None = None):
        self.kernel, self.filename, self.config = kernel_name, filename, config
        self.checks = checks or Checks()
        self.warnings: list[str] = []
        self.tpb = config.threads_per_block
        self.wpb = config.warps_per_block
        nb = config.n_blocks
        self.races = self.checks.enabled("races")
        self.uninit = self.checks.enabled("uninitialised")
        self.epoch = np.zeros(nb, np.int64)
        self.wepoch = np.zeros(nb * self.wpb, np.int64)
        self.fences = np.zeros(nb * self.tpb, np.int64)
        self._shadows: dict[int, _Shadow] = {}
        # counters
        self.per_thread = {k: np.zeros(nb * self.tpb, np.int64) for k in
                           ("global_loads", "global_stores", "shared_loads", "shared_stores")}
        self.counts = dict.fromkeys(
            ("global_loads", "global_stores", "global_load_requests", "global_store_requests",
             "global_load_sectors", "global_store_sectors", "shared_loads", "shared_stores",
             "shared_requests", "bank_conflict_wavefronts", "atomics", "barriers", "warp_ops"), 0)
        self.written: set[str] = set()
        self.read: set[str] = set()  # global arrays some thread loaded from (the data flow)
        # per source line: (space, kind, line) -> [requests, sectors or wavefronts], so a
        # diagnostic can name the line of an uncoalesced or bank-conflicted access
        self.by_line: dict[tuple[str, str, int], list[int]] = {}
        # scalar path: Python-side twins of the epochs and shadows, and an access log
        self._ep1 = [0] * nb
        self._wep1 = [0] * (nb * self.wpb)
        self._stale1 = False  # epochs changed by a vector barrier, not yet in _ep1 / _wep1
        self._fence1: dict[int, int] = {}
        self._shadows1: dict[int, dict[int, list]] = {}
        self._log_g: list[int] = []
        self._log_site: list[int] = []  # line << 32 | (handle slot * 4 + access code)
        self._log_flat: list[int] = []
        self._slots: dict[int, int] = {}
        self._slot_info: list[tuple[int, int, int]] = []  # (address, itemsize, block stride)
        self._slot_global: dict[int, object] = {}  # slot number -> handle, global arrays
        # vector path: access patterns seen before, the pattern of the last `index_lanes`
        # result, and per-thread counts not yet added ((id(lanes), key) -> [lanes, key, times])
        self._patterns: dict = {}
        self._last = None
        self._pending: dict = {}
        self._pending_lanes = 0  # lanes of the Lanes records held by _pending
        self._sync_ver = 0  # barriers + syncwarps so far (Lanes keep their epochs per version)
        self._fenced = False  # any threadfence yet
        # acquire side of a fence: a load in another block is ordered after a fenced write only
        # once the reading thread (or its block, before a barrier) did a global atomic, as in the
        # "last block" pattern (blocks are not ordered on a GPU: a fence alone orders nothing)
        self._acq1: set[int] = set()          # threads that did a global atomic
        self._acq_ep1: dict[int, int] = {}    # block -> its epoch at its first global atomic

    # ------------------------------------------------------------------ diagnostics
    def _fail(self, cls, what: str, block: int, thread: int, line: int, filename=None,
              array=None, index=None) -> None:
        b, t = self.config.block_xyz(int(block)), self.config.thread_xyz(int(thread))
        fn = filename or self.filename
        err = cls(f"{where(self.kernel, fn, line, b, t)}: {what}", kernel=self.kernel,
                  filename=fn, line=line, block=b, thread=t, array=array, index=index)
        self.checks.report(err, self.warnings)

    # ------------------------------------------------------------------ indexing
    def index(self, space, handle, idx, block, thread, line, filename=None) -> np.ndarray:
        """Flat positions in `handle.flat` of the lanes' indices; raises OutOfBoundsError."""
        block = np.asarray(block, np.int64)
        n = block.shape[0]
        shape = handle.shape
        if len(idx) != len(shape):
            raise SimError(f"{where(self.kernel, filename or self.filename, line)}: array "
                           f"{handle.name!r} has {len(shape)} dimensions, indexed with {len(idx)}")
        part = _vector_part(handle, idx, n)
        if part is None:  # some lane out of bounds (or an unusual index type): the full check
            return self._index_checked(space, handle, idx, block, thread, line, filename)
        flat, base = part
        if flat is None:
            flat = np.full(n, base, np.int64)
        elif base:
            flat += base
        if space == "shared":
            flat += (block - handle.first_block) * handle.block_stride
        return flat

    def index_lanes(self, space, handle, idx, lanes: "Lanes", line, filename=None) -> np.ndarray:
        """`index` for the SIMT executor: vectors in `idx` cover every lane of the batch (the
        active ones, `lanes.act`, are taken here). A pattern of index vectors seen before (same
        objects, same lanes) reuses its bounds check and counters; scalar parts are checked on
        every access. Pass the result and `lanes` to `access`."""
        shape = handle.shape
        if len(idx) != len(shape):
            raise SimError(f"{where(self.kernel, filename or self.filename, line)}: array "
                           f"{handle.name!r} has {len(shape)} dimensions, indexed with {len(idx)}")
        hit = self._pattern_hit(handle, idx, lanes)
        if hit is not None:
            pat, base = hit
            flat = pat.vec_flat + base
            self._last = (flat, pat, base)
            return flat
        self._last = None
        act = lanes.act
        sub = idx if act is None else tuple(
            i[act] if isinstance(i, np.ndarray) and i.ndim else i for i in idx)
        part = _vector_part(handle, sub, lanes.n)
        if part is None:
            return self._index_checked(space, handle, sub, lanes.block, lanes.thread, line,
                                       filename)
        vec, base = part
        if vec is None:
            vec = np.zeros(lanes.n, np.int64)
        vec_flat = vec + lanes.block_offset(handle) if space == "shared" else vec
        flat = vec_flat + base
        pat = _Pattern((handle, lanes) + tuple(idx), vec_flat, vec, tuple(
            (p, dim, st) for p, (i, dim, st) in enumerate(zip(idx, shape, handle.estrides))
            if not (isinstance(i, np.ndarray) and i.ndim)))
        pat.nonneg = min(handle.estrides, default=0) >= 0
        key = _pattern_key(handle, lanes, idx)
        if all(not (isinstance(i, np.ndarray) and i.ndim) or i.base is None for i in idx):
            for i in idx:  # the key holds their ids: they must not change while cached
                if isinstance(i, np.ndarray) and i.ndim:
                    i.flags.writeable = False
            if len(self._patterns) >= _PATTERNS:
                del self._patterns[next(iter(self._patterns))]
            self._patterns[key] = pat
        self._last = (flat, pat, base)
        return flat

    def _pattern_hit(self, handle, idx, lanes):
        """(pattern, base) when `idx` is a pattern seen before whose scalar parts are in
        bounds (`base`: the offset plus those parts times their strides), else None."""
        pat = self._patterns.get(_pattern_key(handle, lanes, idx))
        if pat is None:
            return None
        base = handle.offset
        for p, dim, st in pat.scalars:
            i = int(idx[p])
            if not 0 <= i < dim:
                return None
            base += i * st
        return pat, base

    def load_lanes(self, space, handle, idx, lanes: "Lanes", line, filename=None) -> np.ndarray:
        """A SIMT load from global or shared memory: `index_lanes`, then `access`, then the
        lanes' values from `handle.flat`. With neither checker that needs positions on (races,
        uninitialised reads), a known pattern over ordered lanes is only counted: its positions
        are never made (the values come from `vec_flat` in a view shifted by `base`)."""
        if not (self.races or self.uninit) and lanes.ordered and \
                len(idx) == len(handle.shape):
            hit = self._pattern_hit(handle, idx, lanes)
            if hit is not None and hit[0].nonneg:
                pat, base = hit
                self._last = None
                last = (None, pat, base)
                if line is None:
                    self._count_vec(space, handle, "load", None, lanes, last)
                else:
                    counts = self.counts
                    rk, uk = _REQUEST_KEYS[space, "load"]
                    r0, u0 = counts[rk], counts[uk]
                    self._count_vec(space, handle, "load", None, lanes, last)
                    self._note_line(space, "load", line, counts[rk] - r0, counts[uk] - u0)
                sq = pat.squeezed
                if sq is None:
                    sq = pat.squeezed = _squeeze(pat.vec_flat)
                if sq:  # the same values, each element gathered once and then repeated
                    small, shape = sq
                    if shape[2] == 1:  # runs of one value: np.repeat is the faster copy
                        return np.repeat(handle.flat[base:][small.reshape(-1)], shape[1])
                    out = np.empty(shape, handle.flat.dtype)
                    out[...] = handle.flat[base:][small]
                    return out.reshape(-1)
                return handle.flat[base:][pat.vec_flat]
        flat = self.index_lanes(space, handle, idx, lanes, line, filename)
        self.access(space, handle, "load", flat, lanes.block, lanes.thread, line, filename,
                    lanes)
        return handle.flat[flat]

    def lanes(self, block, thread, act=None) -> "Lanes":
        """The `Lanes` record of these lanes (for `index_lanes` / `access`)."""
        return Lanes(block, thread, self.tpb, self.wpb, act)

    def _index_checked(self, space, handle, idx, block, thread, line, filename) -> np.ndarray:
        """`index` lane by lane in numpy: reports the first out-of-bounds lane."""
        block = np.asarray(block, np.int64)
        n = block.shape[0]
        shape = handle.shape
        flat = np.full(n, handle.offset, np.int64)
        bad = np.zeros(n, bool)
        for k, (i, dim, st) in enumerate(zip(idx, shape, handle.estrides)):
            i = np.broadcast_to(np.asarray(i).astype(np.int64, copy=False), (n,))
            bad |= (i < 0) | (i >= dim)
            flat += i * st
        if bad.any():
            lane = int(np.argmax(bad))
            index = tuple(int(np.broadcast_to(np.asarray(i), (n,))[lane]) for i in idx)
            self._oob(handle, space, index, int(block[lane]), int(np.asarray(thread)[lane]),
                      line, filename)
            flat = np.where(bad, handle.offset, flat)  # downgraded: keep memory safe
        if space == "shared":
            flat += (block - handle.first_block) * handle.block_stride
        return flat

    def index1(self, space, handle, idx, block: int, thread: int, line: int,
               filename=None) -> int:
        """Scalar twin of `index` for one lane; `idx` a tuple of ints (a slice in it raises
        TypeError, which callers use to take the view path)."""
        shape = handle.shape
        if len(idx) != len(shape):
            raise SimError(f"{where(self.kernel, filename or self.filename, line)}: array "
                           f"{handle.name!r} has {len(shape)} dimensions, indexed with {len(idx)}")
        if len(idx) == 1:
            i = idx[0]
            if not 0 <= i < shape[0]:
                self._oob(handle, space, (int(i),), block, thread, line, filename)
                return handle.offset
            flat = handle.offset + i * handle.estrides[0]
        else:
            flat = handle.offset
            for i, dim, st in zip(idx, shape, handle.estrides):
                if not 0 <= i < dim:
                    self._oob(handle, space, tuple(int(v) for v in idx), block, thread, line,
                              filename)
                    return handle.offset
                flat += i * st
        if space == "shared":
            flat += (block - handle.first_block) * handle.block_stride
        return int(flat)

    def _oob(self, handle, space, index, block, thread, line, filename):
        shape = tuple(handle.shape)
        idx = index[0] if len(index) == 1 else index
        self._fail(OutOfBoundsError,
                   f"out-of-bounds access to {space} array {handle.name!r} of shape "
                   f"{shape if len(shape) > 1 else shape[0]} at index {idx}",
                   block, thread, line, filename, handle.name, index)

    # ------------------------------------------------------------------ accesses
    def _shadow(self, handle) -> _Shadow:
        sh = self._shadows.get(handle.buffer_id)
        if sh is None:
            sh = self._shadows[handle.buffer_id] = _Shadow(handle.flat.shape[0])
        return sh

    def _index_of(self, handle, flat: int):
        f = flat - handle.offset
        if getattr(handle, "block_stride", 0):
            f %= handle.block_stride
        out = []
        for st in handle.estrides:
            q, f = divmod(f, st) if st else (0, f)
            out.append(int(q))
        return out[0] if len(out) == 1 else tuple(out)

    def access(self, space, handle, kind, flat, block, thread, line, filename=None,
               lanes: "Lanes | None" = None, values=None) -> None:
        """One instruction's accesses by many lanes: checks, then counters. `lanes` (optional)
        is the `Lanes` record of `block` and `thread`; `values` (optional, stores): what the
        lanes store (a vector over them, or one scalar for all), for the silent-store rule."""
        last, self._last = self._last, None
        if space in ("local", "const"):
            return
        flat = np.asarray(flat, np.int64)
        if lanes is None:
            lanes = Lanes(block, thread, self.tpb, self.wpb)
            last = None
        elif last is not None and last[0] is not flat:
            last = None
        if self.uninit and kind != "store":
            init = handle.initialised[flat]
            if not init.all():
                lane = int(np.argmin(init))
                self._uninit(space, handle, int(flat[lane]), int(lanes.block[lane]),
                             int(lanes.thread[lane]), line, filename)
        if self.races:
            self._race_vec(space, handle, kind, flat, lanes, line, filename,
                           last[1] if last is not None else None,
                           values if kind == "store" else None)
        if kind != "load":
            handle.initialised[flat] = True
            if space == "global":
                self.written.add(handle.name)
        if kind == "atomic" and space == "global" and self.races:
            self._acquired(lanes.block, lanes.g)
        if kind == "atomic" or line is None:
            self._count_vec(space, handle, kind, flat, lanes, last)
            return
        rk, uk = _REQUEST_KEYS[space, kind]
        r0, u0 = self.counts[rk], self.counts[uk]
        self._count_vec(space, handle, kind, flat, lanes, last)
        self._note_line(space, kind, line, self.counts[rk] - r0, self.counts[uk] - u0)

    def _note_line(self, space: str, kind: str, line: int, requests: int, units: int) -> None:
        entry = self.by_line.get((space, kind, line))
        if entry is None:
            self.by_line[(space, kind, line)] = [requests, units]
        else:
            entry[0] += requests
            entry[1] += units

    def access1(self, space, handle, kind, flat: int, block: int, thread: int, line: int,
                filename=None, value=None) -> None:
        """Scalar twin of `access` for one lane (`value`: what a store stores, optional)."""
        if space == "local" or space == "const":
            return
        silent = False
        if kind == "load":
            if self.uninit and not handle.initialised[flat]:
                self._uninit(space, handle, flat, block, thread, line, filename)
            if space == "global":
                self.read.add(handle.name)
        else:
            if kind == "atomic":
                if self.uninit and not handle.initialised[flat]:
                    self._uninit(space, handle, flat, block, thread, line, filename)
            elif value is not None and self.races and handle.initialised[flat]:
                silent = _same_bits1(handle.flat, flat, value)
            handle.initialised[flat] = True
            if space == "global":
                self.written.add(handle.name)
        g = block * self.tpb + thread
        if self.races and not silent:
            self._race1(space, handle, kind, flat, block, g, line, filename)
        if kind == "atomic":
            if space == "global" and self.races:
                self._acquired(block, g)
            self.counts["atomics"] += 1
            return
        slot = self.slot(space, handle)
        self._log_g.append(g)
        self._log_site.append(line << 32 | (slot if kind == "load" else slot + 1))
        self._log_flat.append(flat)

    def scalar_recorder(self, space, handle, kind):
        """For the per-thread executor: a function `rec(flat, g, frame, value=None)` doing what
        `access1(space, handle, kind, flat, g // tpb, g % tpb, frame.f_lineno,
        frame.f_code.co_filename, value)` does (`g`: global thread id, `frame`: the accessing
        frame, `value`: what a store stores), with what does not change bound once. None for
        local and constant arrays."""
        if space == "local" or space == "const":
            return None
        tpb = self.tpb
        if kind == "atomic":
            access1 = self.access1

            def rec(flat, g, frame):
                access1(space, handle, kind, flat, g // tpb, g % tpb, frame.f_lineno,
                        frame.f_code.co_filename)
            return rec
        slot = self.slot(space, handle)
        hc = slot if kind == "load" else slot + 1
        log_g, log_site, log_flat = self._log_g.append, self._log_site.append, self._log_flat.append
        # frame.f_lineno walks the code's line table on every call: remember the log entry
        # (line << 32 | hc) of each bytecode offset, per code object (the one seen last first)
        site = [None, None]  # [code, {f_lasti: line << 32 | hc}]
        by_code: dict = {}  # id(code) -> (code, {f_lasti: ...})
        check = self.scalar_checker(space, handle, kind)
        if check is None:  # counters only
            init = _flags(handle.initialised)
            store = kind != "load"
            written, name, is_global = self.written, handle.name, space == "global"

        def rec(flat, g, frame, value=None):
            if check is not None:
                check(flat, g, frame, value)
            elif store:
                init[flat] = True
                if is_global:
                    written.add(name)
            code = frame.f_code
            if code is site[0]:
                lines = site[1]
            else:
                site[0] = code
                lines = site[1] = by_code.setdefault(id(code), (code, {}))[1]
            lasti = frame.f_lasti
            entry = lines.get(lasti)
            if entry is None:
                entry = lines[lasti] = frame.f_lineno << 32 | hc
            log_g(g)
            log_site(entry)
            log_flat(flat)
        return rec

    def scalar_checker(self, space, handle, kind):
        """The checkers of one scalar access, nothing counted: `check(flat, g, frame,
        value=None)` (see `scalar_recorder`; `frame` needs `f_lineno` and
        `f_code.co_filename`, read only to report). None when neither the race nor the
        uninitialised-read checker is on, and for local and constant arrays."""
        if space == "local" or space == "const" or not (self.races or self.uninit):
            return None
        tpb = self.tpb
        init = _flags(handle.initialised)
        uninit_check = kind == "load" and self.uninit
        store = kind != "load"
        written, name, is_global = self.written, handle.name, space == "global"
        uninit = self._uninit
        if self.races:
            return self._race_checker(space, handle, store, uninit_check)

        def check(flat, g, frame, value=None):
            if uninit_check and not init[flat]:
                uninit(space, handle, flat, g // tpb, g % tpb, frame.f_lineno,
                       frame.f_code.co_filename)
            if store:
                init[flat] = True
                if is_global:
                    written.add(name)
        return check

    def _race_checker(self, space, handle, store, uninit_check):
        """`scalar_checker` with the race checker on: the cases `_race1` settles without a
        finding (nothing recorded, the same thread, a barrier of the block in between) are
        done inline; anything else goes through `_race1` itself. A silent store (the bits
        already there, element initialised) skips the race shadow altogether."""
        tpb, wpb = self.tpb, self.wpb
        init, written, name = _flags(handle.initialised), self.written, handle.name
        is_global = space == "global"
        kind = "store" if store else "load"
        shadows = self._shadows1.setdefault(handle.buffer_id, {})
        ep1, wep1, fence1 = self._ep1, self._wep1, self._fence1
        race1, ordered1, uninit = self._race1, self._ordered1, self._uninit
        inst = self
        same = _same_bits_recorder(handle.flat) if store else None

        def check(flat, g, frame, value=None):
            if uninit_check and not init[flat]:
                uninit(space, handle, flat, g // tpb, g % tpb, frame.f_lineno,
                       frame.f_code.co_filename)
            if store:
                if init[flat] and value is not None and same(flat, value):
                    return  # it changes nothing, so it neither races nor orders
                init[flat] = True
                if is_global:
                    written.add(name)
            if inst._stale1:
                inst._sync1()
            block = g // tpb
            r = shadows.get(flat)
            if r is None:
                r = shadows[flat] = [-1, 0, 0, False, 0, -1, 0, 0]
            ep = ep1[block]
            wt = r[0]
            rt = r[5]
            if (wt < 0 or wt == g or (wt // tpb == block and r[1] != ep)) and (
                    not store or rt == -1 or rt == g or r[6] != ep and (
                        -rt - 2 == block if rt <= -2 else rt // tpb == block)):
                wep = wep1[block * wpb + (g % tpb) // WARP]
                if store:
                    r[0], r[1], r[2], r[3], r[4], r[5] = g, ep, wep, False, fence1.get(g, 0), -1
                else:
                    if rt == -1 or rt == g:
                        r[5] = g
                    elif rt <= -2:
                        r[5] = -block - 2 if (-rt - 2 == block and r[6] == ep) else g
                    elif rt // tpb != block or r[6] != ep or ordered1(rt, r[6], r[7], g, block):
                        r[5] = g
                    else:
                        r[5] = -block - 2
                    r[6], r[7] = ep, wep
            else:
                race1(space, handle, kind, flat, block, g, frame.f_lineno,
                      frame.f_code.co_filename)
        return check

    def slot(self, space, handle) -> int:
        """A handle's code in the access logs: its number * 4 + its load code (store = +1),
        registered on first use."""
        slot = self._slots.get(handle.buffer_id)
        return self._new_slot(space, handle) if slot is None else slot

    def _new_slot(self, space, handle) -> int:
        k = len(self._slot_info)
        stride = getattr(handle, "block_stride", 0) if space == "shared" else 0
        self._slot_info.append((handle.address, handle.dtype.itemsize, stride))
        if space == "global":
            self._slot_global[k] = handle
        slot = self._slots[handle.buffer_id] = k * 4 + _CODE[space, "load"]
        return slot

    def _uninit(self, space, handle, flat, block, thread, line, filename):
        what = "shared array" if space == "shared" else "device array"
        self._fail(UninitialisedReadError,
                   f"read of uninitialised {what} {handle.name!r} at index "
                   f"{self._index_of(handle, flat)} (never written since allocation)",
                   block, thread, line, filename, handle.name, self._index_of(handle, flat))

    # ------------------------------------------------------------------ races
    def _race_msg(self, space, handle, kind, flat, other, other_kind, block, thread, line,
                  filename):
        if other <= -2:
            who = f"other threads of block {self.config.block_xyz(-other - 2)}"
        else:
            ob, ot = divmod(int(other), self.tpb)
            who = (f"thread {self.config.thread_xyz(ot)} of block {self.config.block_xyz(ob)}")
        hint = ("with no syncthreads() in between" if space == "shared" or
                (other > -2 and int(other) // self.tpb == block) or other <= -2
                else "from another block (use an atomic, or a separate launch)")
        self._fail(RaceError,
                   f"data race on {space} array {handle.name!r} at index "
                   f"{self._index_of(handle, flat)}: {kind} conflicts with a {other_kind} by "
                   f"{who} {hint}", block, thread, line, filename, handle.name,
                   self._index_of(handle, flat))

    def _ordered1(self, other: int, ep: int, wep: int, g: int, block: int) -> bool:
        """Is an earlier access by global thread `other` ordered before thread `g`'s access?"""
        if other == g:
            return True
        tpb = self.tpb
        if other // tpb != block:
            return False
        if ep != self._ep1[block]:
            return True
        w = (g % tpb) // WARP
        return (other % tpb) // WARP == w and wep != self._wep1[block * self.wpb + w]

    def _race1(self, space, handle, kind, flat, block, g, line, filename):
        if self._stale1:
            self._sync1()
        shadows = self._shadows1.get(handle.buffer_id)
        if shadows is None:
            shadows = self._shadows1[handle.buffer_id] = {}
        rec = shadows.get(flat)
        ep = self._ep1[block]
        wep = self._wep1[block * self.wpb + (g % self.tpb) // WARP]
        if rec is None:
            # [writer, its epoch, its warp epoch, atomic?, its fences, reader, epoch, warp epoch]
            rec = shadows[flat] = [-1, 0, 0, False, 0, -1, 0, 0]
        thread = g % self.tpb
        wt = rec[0]
        if wt >= 0 and wt != g and not (kind == "atomic" and rec[3]) and \
                not self._ordered1(wt, rec[1], rec[2], g, block):
            if not (kind == "load" and wt // self.tpb != block
                    and self._fence1.get(wt, 0) > rec[4] and self._has_acquired(block, g)):
                self._race_msg(space, handle, kind, flat, wt, "atomic" if rec[3] else "store",
                               block, thread, line, filename)
        rt = rec[5]
        if kind == "load":
            if rt == -1 or rt == g:
                rec[5] = g
            elif rt <= -2:
                rec[5] = -block - 2 if (-rt - 2 == block and rec[6] == ep) else g
            elif rt // self.tpb != block or self._ordered1(rt, rec[6], rec[7], g, block):
                rec[5] = g
            else:
                rec[5] = -block - 2
            rec[6], rec[7] = ep, wep
            return
        if rt != -1 and rt != g:
            if rt <= -2:
                conflict = (-rt - 2) != block or rec[6] == ep
            else:
                conflict = not self._ordered1(rt, rec[6], rec[7], g, block)
            if conflict:
                self._race_msg(space, handle, kind, flat, rt, "load", block, thread, line,
                               filename)
        rec[0], rec[1], rec[2], rec[3], rec[4], rec[5] = (g, ep, wep, kind == "atomic",
                                                          self._fence1.get(g, 0), -1)

    def _ordered_vec(self, other, o_ep, o_wep, g, block, w, ep, wep):
        """Is an earlier access by global thread `other` (at block epoch `o_ep`, warp epoch
        `o_wep`) ordered before the access of lane `g` (block, warp `w`, epochs `ep`, `wep`)?"""
        ob = other // self.tpb
        ow = ob * self.wpb + (other % self.tpb) // WARP
        return (other == g) | ((ob == block) & ((o_ep != ep) | ((ow == w) & (o_wep != wep))))

    def _lane_epochs(self, lanes):
        """Block and warp epochs of the lanes, kept on `lanes` until the next barrier/syncwarp."""
        if lanes.ep_ver != self._sync_ver:
            lanes.ep = self.epoch[lanes.block]
            lanes.wep = self.wepoch[lanes.warp]
            lanes.ep_ver = self._sync_ver
        return lanes.ep, lanes.wep

    def _race_vec(self, space, handle, kind, flat, lanes, line, filename, pat=None,
                  values=None):
        """The race rule of the module docstring for one instruction. Cheap tests settle most
        lanes (nothing recorded yet, the same thread, a barrier of the block in between); the
        exact rule runs on the lanes left. `values` (stores): what the lanes store; silent
        lanes (`_quiet`) are left out of the rule and of the shadow."""
        dups = None
        if values is not None and flat.shape[0]:
            if flat.shape[0] > 1:
                dups = self._dups(flat, lanes, pat)
            quiet = _quiet(handle, flat, values, dups)
            if quiet is not None:
                keep = np.flatnonzero(~quiet)
                if keep.shape[0] == 0:
                    return
                lanes = Lanes(lanes.block[keep], lanes.thread[keep], self.tpb, self.wpb)
                flat, pat, dups = flat[keep], None, None
        sh = self._shadow(handle)
        block, thread, g, w = lanes.block, lanes.thread, lanes.g, lanes.warp
        ep, wep = self._lane_epochs(lanes)
        tpb = self.tpb
        # against the previous writer
        if sh.written:
            wt = sh.w_thr[flat]
            cand = (wt >= 0) & (wt != g)
            if kind == "atomic" and sh.atomic:
                cand &= ~sh.w_atomic[flat]
            if cand.any():
                cand &= (wt // tpb != block) | (sh.w_ep[flat] == ep)
            if cand.any():
                sub = np.flatnonzero(cand)
                f, o, bs = flat[sub], wt[sub], block[sub]
                bad = ~self._ordered_vec(o, sh.w_ep[f], sh.w_wep[f], g[sub], bs, w[sub],
                                         ep[sub], wep[sub])
                if kind == "load":
                    fenced = (o // tpb != bs) & (self.fences[o] > sh.w_fence[f])
                    if fenced.any():
                        fenced &= self._have_acquired(bs, g[sub], ep[sub])
                    bad &= ~fenced
                if bad.any():
                    i = int(sub[np.argmax(bad)])
                    self._race_msg(space, handle, kind, int(flat[i]), int(wt[i]),
                                   "atomic" if sh.w_atomic[flat[i]] else "store", int(block[i]),
                                   int(thread[i]), line, filename)
        if kind != "load":
            # against earlier readers
            if sh.read:
                rt = sh.r_thr[flat]
                cand = (rt != -1) & (rt != g)
                if cand.any():
                    rb = np.where(rt <= -2, -rt - 2, rt // tpb)  # the readers' block
                    cand &= (rb != block) | (sh.r_ep[flat] == ep)
                if cand.any():
                    sub = np.flatnonzero(cand)
                    f, rs, bs, eps = flat[sub], rt[sub], block[sub], ep[sub]
                    r_ep = sh.r_ep[f]
                    multi = rs <= -2
                    ordered = self._ordered_vec(np.maximum(rs, 0), r_ep, sh.r_wep[f], g[sub],
                                                bs, w[sub], eps, wep[sub])
                    multi_ok = multi & ((-rs - 2) == bs) & (r_ep != eps)
                    bad = np.where(multi, ~multi_ok, ~ordered)
                    if bad.any():
                        i = int(sub[np.argmax(bad)])
                        self._race_msg(space, handle, kind, int(flat[i]), int(rt[i]), "load",
                                       int(block[i]), int(thread[i]), line, filename)
            if kind == "store" and flat.shape[0] > 1:
                # two lanes of one instruction storing to one element
                pair = (dups or self._dups(flat, lanes, pat))[0]
                if pair is not None:
                    i, j = pair
                    self._race_msg(space, handle, kind, int(flat[i]), int(g[j]), "store",
                                   int(block[i]), int(thread[i]), line, filename)
            sh.w_thr[flat] = g
            sh.w_ep[flat], sh.w_wep[flat] = ep, wep
            if kind == "atomic" or sh.atomic:
                sh.w_atomic[flat] = kind == "atomic"
                sh.atomic = True
            if self._fenced:  # else every fence count is 0, as w_fence already is
                sh.w_fence[flat] = self.fences[g]
            if sh.read:
                sh.r_thr[flat] = -1
            sh.written = True
        else:
            # readers: one thread, or "several of this block epoch"
            dups = self._dups(flat, lanes, pat) if flat.shape[0] > 1 else (None, None, False)
            if lanes.neg_block is None:
                lanes.neg_block = -block - 2
            if dups[2]:  # every lane shares its element with another lane
                new = lanes.neg_block
            else:
                rt = sh.r_thr[flat]
                keep = (rt == -1) | (rt == g)
                if not keep.all():
                    sub = np.flatnonzero(~keep)
                    f, rs, bs, eps = flat[sub], rt[sub], block[sub], ep[sub]
                    r_ep = sh.r_ep[f]
                    r0 = np.maximum(rs, 0)
                    ordered = self._ordered_vec(r0, r_ep, sh.r_wep[f], g[sub], bs, w[sub], eps,
                                                wep[sub])
                    ks = (rs >= 0) & (ordered | (r0 // tpb != bs))
                    ks |= (rs <= -2) & (((-rs - 2) != bs) | (r_ep != eps))
                    keep[sub] = ks
                new = np.where(keep, g, lanes.neg_block)
                if dups[1] is not None:
                    new = np.where(dups[1], lanes.neg_block, new)
            sh.r_thr[flat] = new
            sh.r_ep[flat], sh.r_wep[flat] = ep, wep
            sh.read = True

    @staticmethod
    def _dups(flat, lanes, pat=None):
        """Lanes of one instruction on one element: (first pair (i, j) in element order or
        None, mask of the lanes sharing an element or None, every lane shares). Kept on the
        pattern (shifting every position keeps the answer)."""
        if pat is not None and pat.dups is not None:
            return pat.dups
        order = np.argsort(flat if pat is None else pat.vec_flat, kind="stable")
        fs = flat[order]
        dup = fs[1:] == fs[:-1]
        if not lanes.ordered:  # the same thread twice is no conflict
            gs = lanes.g[order]
            dup &= gs[1:] != gs[:-1]
        if dup.any():
            k = int(np.argmax(dup))
            shared = np.zeros(flat.shape[0], bool)
            shared[order[1:][dup]] = True
            shared[order[:-1][dup]] = True
            out = ((int(order[1:][k]), int(order[:-1][k])), shared, bool(shared.all()))
        else:
            out = (None, None, False)
        if pat is not None:
            pat.dups = out
        return out

    # ------------------------------------------------------------------ sync events
    def barrier(self, block_ids, line=None) -> None:
        """A syncthreads completed for these blocks."""
        block_ids = np.atleast_1d(np.asarray(block_ids, np.int64))
        self.epoch[block_ids] += 1
        self._sync_ver += 1
        if block_ids.shape[0] > 4:  # many blocks (lockstep): vectors now, scalar twins later
            self.wepoch.reshape(-1, self.wpb)[block_ids] += 1
            self._stale1 = True
        else:
            self._sync1()
            for b in block_ids.tolist():
                self.wepoch[b * self.wpb:(b + 1) * self.wpb] += 1
                self._ep1[b] += 1
                for w in range(b * self.wpb, (b + 1) * self.wpb):
                    self._wep1[w] += 1
        self.counts["barriers"] += int(block_ids.shape[0])

    def _sync1(self) -> None:
        """Rebuild the scalar path's epoch lists after a vector barrier."""
        if self._stale1:  # in place: recorders hold these lists
            self._ep1[:] = self.epoch.tolist()
            self._wep1[:] = self.wepoch.tolist()
            self._stale1 = False

    def syncwarp(self, block: int, warp: int) -> None:
        """A syncwarp (or completed warp rendezvous that orders memory) in one warp."""
        self._sync1()
        self._sync_ver += 1
        self.wepoch[block * self.wpb + warp] += 1
        self._wep1[block * self.wpb + warp] += 1

    def _acquired(self, block, g) -> None:
        """Lanes (block, global thread) did a global atomic: record the acquire."""
        if self._stale1:
            self._sync1()
        for b, t in zip(np.atleast_1d(block).tolist(), np.atleast_1d(g).tolist()):
            self._acq1.add(t)
            self._acq_ep1.setdefault(b, self._ep1[b])

    def _has_acquired(self, block: int, g: int) -> bool:
        """Thread g did a global atomic, or a thread of its block did before a barrier since."""
        if g in self._acq1:
            return True
        first = self._acq_ep1.get(block)
        return first is not None and first < self._ep1[block]

    def _have_acquired(self, block, g, ep) -> np.ndarray:
        if not self._acq1:
            return np.zeros(len(g), bool)
        return np.fromiter((t in self._acq1 or (b in self._acq_ep1 and self._acq_ep1[b] < e)
                            for b, t, e in zip(block.tolist(), g.tolist(), ep.tolist())), bool, len(g))

    def fence(self, block, thread) -> None:
        """threadfence by these lanes: their earlier writes become visible to other blocks."""
        g = np.asarray(block, np.int64) * self.tpb + np.asarray(thread, np.int64)
        self.fences[g] += 1
        self._fenced = True
        for t in np.atleast_1d(g).tolist():
            self._fence1[t] = self._fence1.get(t, 0) + 1

    def warp_op(self, name: str, n_lanes: int, line=None, warps: int | None = None) -> None:
        """A warp collective by `n_lanes` lanes; counts one op per warp taking part (`warps`,
        or n_lanes / 32 rounded up when not given)."""
        self.counts["warp_ops"] += warps if warps is not None else -(-int(n_lanes) // WARP)

    # ------------------------------------------------------------------ counters
    def _byte_addr(self, space, handle, flat):
        if space == "shared":
            within = flat % handle.block_stride if handle.block_stride else flat
            return handle.address + within * handle.dtype.itemsize
        return handle.address + flat * handle.dtype.itemsize

    def _count_vec(self, space, handle, kind, flat, lanes, last=None):
        if kind == "load" and space == "global":
            self.read.add(handle.name)
        self._count_vec_units(space, handle, kind, flat, lanes, last)

    def _count_vec_units(self, space, handle, kind, flat, lanes, last=None):
        n = lanes.n
        if kind == "atomic":
            self.counts["atomics"] += n
            return
        key = _COUNT_KEYS[space, kind]
        self.counts[key] += n
        pk = (id(lanes), key)
        pending = self._pending.get(pk)
        if pending is None:
            if len(self._pending) >= 256 or self._pending_lanes >= 1 << 18:
                self._add_pending()  # (each entry keeps its Lanes alive)
            self._pending[pk] = [lanes, key, 1]
            self._pending_lanes += n
        else:
            pending[2] += 1
        if not lanes.ordered:
            warp = lanes.warp
            addr = self._byte_addr(space, handle, flat)
            if space == "global":
                sectors = np.unique(_combine(warp, addr // SECTOR_BYTES)).shape[0]
                self.counts[f"global_{kind}_requests"] += lanes.n_req
                self.counts[f"global_{kind}_sectors"] += sectors
            else:
                self.counts["shared_requests"] += lanes.n_req
                self.counts["bank_conflict_wavefronts"] += _wavefronts(
                    warp, addr, handle.dtype.itemsize)
            return
        itemsize = handle.dtype.itemsize
        if space == "global":
            rk, sk = _REQUEST_KEYS[space, kind]
            self.counts[rk] += lanes.n_req
            if last is not None:  # a known pattern: its count for this alignment
                _, pat, base = last
                shift = (handle.address + base * itemsize) % SECTOR_BYTES
                sectors = pat.counted.get(shift)
                if sectors is None:  # (shift + within * itemsize) // SECTOR_BYTES, in place
                    key = pat.vec_within * itemsize
                    key += shift
                    key >>= _SECTOR_SHIFT
                    sectors = pat.counted[shift] = _distinct_per_request(lanes, key)
            else:
                sectors = _distinct_per_request(
                    lanes, self._byte_addr(space, handle, flat) >> _SECTOR_SHIFT)
            self.counts[sk] += sectors
        else:
            self.counts["shared_requests"] += lanes.n_req
            if last is not None:  # shifting every address by whole words keeps the conflicts
                _, pat, base = last
                shift = (handle.address + base * itemsize) % BANK_BYTES
                waves = pat.counted.get(shift)
                if waves is None:
                    waves = pat.counted[shift] = _wavefronts_lanes(
                        lanes, shift + pat.vec_within * itemsize, itemsize)
            else:
                waves = _wavefronts_lanes(lanes, self._byte_addr(space, handle, flat), itemsize)
            self.counts["bank_conflict_wavefronts"] += waves

    def _add_pending(self) -> None:
        """Add the per-thread counts of vector accesses noted in `_pending`."""
        for lanes, key, times in self._pending.values():
            pt = self.per_thread[key]
            if lanes.g0 is not None:
                pt[lanes.g0:lanes.g0 + lanes.n] += times
            elif lanes.ordered:
                pt[lanes.g] += times
            else:
                np.add.at(pt, lanes.g, times)
        self._pending.clear()
        self._pending_lanes = 0

    def pending(self) -> int:
        """Accesses of the scalar path logged and not yet counted (`flush`)."""
        return len(self._log_g)

    def flush(self, sites=None) -> None:
        """Turn the scalar path's access log into requests, sectors, wavefronts and per-thread
        counts. Requests: the n-th execution of one line on one array by the lanes of one warp.
        `sites`: the per-thread executor's compiled accesses (`_count_sites`)."""
        g = [np.array(self._log_g, np.int64)]
        site = [np.array(self._log_site, np.int64)]
        flat = [np.array(self._log_flat, np.int64)]
        for lst in (self._log_g, self._log_site, self._log_flat):
            lst.clear()  # the same lists: recorders hold their append methods
        if sites:
            more = self._count_sites(sites)
            g, site, flat = g + more[0], site + more[1], flat + more[2]
        g, site, flat = np.concatenate(g), np.concatenate(site), np.concatenate(flat)
        if not g.shape[0]:
            return
        line, hc = site >> 32, site & 0xFFFFFFFF
        info = np.array(self._slot_info, np.int64).reshape(-1, 3)
        code, slot = hc % 4, hc // 4
        base, item, stride = info[slot, 0], info[slot, 1], info[slot, 2]
        within = np.where(stride > 0, flat % np.maximum(stride, 1), flat)
        addr = base + within * item
        n = g.shape[0]
        # nth execution of (thread, array and kind, line): rank within each group, in log order
        group = _combine(g, hc, line)
        order = np.argsort(group, kind="stable")
        sorted_group = group[order]
        starts = np.flatnonzero(np.r_[True, sorted_group[1:] != sorted_group[:-1]])
        nth = np.empty(n, np.int64)
        nth[order] = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
        warp = g // self.tpb * self.wpb + (g % self.tpb) // WARP
        g0 = int(g.min())
        loads = code == _CODE["global", "load"]
        if loads.any():
            self.read.update(self._slot_global[k].name for k in np.unique(slot[loads]).tolist())
        for c, (space, kind) in enumerate(_CODES):
            m = code == c
            if not m.any():
                continue
            key = f"{space}_{'loads' if kind == 'load' else 'stores'}"
            self.counts[key] += int(m.sum())
            per_g = np.bincount(g[m] - g0)  # only the threads logged (one block, usually)
            self.per_thread[key][g0:g0 + per_g.shape[0]] += per_g
            rk, uk = _request_keys(space, kind)
            for ln in np.unique(line[m]).tolist():  # a request never spans two lines
                ml = m & (line == ln)
                _, req = np.unique(_combine(nth[ml], warp[ml], hc[ml]), return_inverse=True)
                req = req.reshape(-1)
                n_req = int(req.max()) + 1
                if space == "global":
                    units = np.unique(_combine(req, addr[ml] // SECTOR_BYTES)).shape[0]
                else:
                    items = item[ml]
                    size = int(items[0])
                    units = (_wavefronts_sorted(req, n_req, addr[ml], size) if (items == size).all()
                             else _wavefronts(req, addr[ml], items))
                self.counts[rk] += n_req
                self.counts[uk] += units
                self._note_line(space, kind, ln, n_req, int(units))

    def _count_sites(self, sites) -> tuple:
        """Count the per-thread executor's compiled accesses: `sites` holds (global thread id,
        line, slot code, list of flat positions) per site and thread (thread_access). Where
        every lane of a warp that reached a site did so equally often, the n-th entries of its
        lanes are one request, counted for many warps at once; the rest is returned as the
        (g, site, flat) arrays of the general count."""
        gs, lines, codes, logs = zip(*sites)
        lengths = np.fromiter(map(len, logs), np.int64, len(logs))
        g = np.array(gs, np.int64)
        key = np.array(lines, np.int64) << 32 | np.array(codes, np.int64)
        used = np.flatnonzero(lengths)
        if not used.shape[0]:
            return [], [], []
        order = used[np.lexsort((g[used], key[used]))]
        k_s, g_s = key[order], g[order]
        if ((k_s[1:] == k_s[:-1]) & (g_s[1:] == g_s[:-1])).any():
            # a site reached more than once by a thread (a device function called again):
            # its lists, in the order they were made, are one
            merged: dict = {}
            for i in order.tolist():
                merged.setdefault((int(key[i]), int(g[i])), []).extend(logs[i])
            logs = list(merged.values())
            k_s = np.array([k for k, _ in merged], np.int64)
            g_s = np.array([x for _, x in merged], np.int64)
            lengths = np.fromiter(map(len, logs), np.int64, len(logs))
            order = np.arange(len(logs))
        lengths = lengths[order]
        rest_g, rest_site, rest_flat = [], [], []
        bounds = np.flatnonzero(np.r_[True, k_s[1:] != k_s[:-1], True])
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            site = int(k_s[a])
            line, hc = site >> 32, site & 0xFFFFFFFF
            gg, ll, rows = g_s[a:b], lengths[a:b], order[a:b].tolist()
            warp = gg // self.tpb * self.wpb + (gg % self.tpb) // WARP
            starts = np.flatnonzero(np.r_[True, warp[1:] != warp[:-1]])
            ends = np.r_[starts[1:], gg.shape[0]].tolist()
            same = (np.minimum.reduceat(ll, starts) == np.maximum.reduceat(ll, starts)).tolist()
            batches: dict = {}
            ragged: list = []
            for s0, s1, uniform in zip(starts.tolist(), ends, same):
                if uniform:
                    batches.setdefault((s1 - s0, int(ll[s0])), []).append((s0, s1))
                else:
                    ragged.append((s0, s1))
            for (n_l, n), spans in batches.items():
                picked = [i for s0, s1 in spans for i in range(s0, s1)]
                if n == 1:  # (numpy converts a list of one-element lists slowly)
                    flat = np.array([logs[rows[i]][0] for i in picked], np.int64)
                else:
                    flat = np.array([logs[rows[i]] for i in picked], np.int64)
                flat = flat.reshape(-1, n_l, n)
                self._count_columns(line, hc, flat, gg[picked])
            if ragged:
                picked = [i for s0, s1 in ragged for i in range(s0, s1)]
                flat = np.array([v for i in picked for v in logs[rows[i]]], np.int64)
                self._mark_stores(hc, flat)
                rest_g.append(np.repeat(gg[picked], ll[picked]))
                rest_site.append(np.full(flat.shape[0], site, np.int64))
                rest_flat.append(flat)
        return rest_g, rest_site, rest_flat

    def _count_columns(self, line: int, hc: int, flat: np.ndarray, g: np.ndarray) -> None:
        """One site's `flat` positions, (warps, lanes, n): request k of a warp is column k of
        its lanes; `g`: the lanes' global thread ids, warp by warp."""
        n_w, n_l, n = flat.shape
        space, kind = _CODES[hc % 4]
        base, item, stride = self._slot_info[hc // 4]
        within = flat % stride if stride > 0 else flat
        addr = (base + within * item).transpose(0, 2, 1)  # (warps, n, lanes): a row a request
        if space == "global":
            sectors = np.sort(addr // SECTOR_BYTES, axis=-1)
            units = int((1 + (sectors[..., 1:] != sectors[..., :-1]).sum(-1)).sum())
        else:
            units = _wavefronts_rows(addr, item)
        rk, uk = _REQUEST_KEYS[space, kind]
        self.counts[rk] += n_w * n
        self.counts[uk] += units
        self._note_line(space, kind, line, n_w * n, units)
        key = _COUNT_KEYS[space, kind]
        self.counts[key] += n_w * n_l * n
        self.per_thread[key][g] += n
        self._mark_stores(hc, flat.reshape(-1))

    def _mark_stores(self, hc: int, flat: np.ndarray) -> None:
        """What the recorders mark for a global store: the elements written, and the array;
        for a global load, the array as read."""
        if hc % 4 == _CODE["global", "store"]:
            handle = self._slot_global[hc // 4]
            handle.initialised[flat] = True
            self.written.add(handle.name)
        elif hc % 4 == _CODE["global", "load"] and flat.size:
            self.read.add(self._slot_global[hc // 4].name)

    def finish(self) -> dict:
        """Counters of the launch (keys in docs/SIMULATOR_DESIGN.md) and the per-thread table."""
        self.flush()
        self._add_pending()
        self._patterns.clear()
        c = dict(self.counts)
        c["sectors_per_request"] = (
            (c["global_load_sectors"] + c["global_store_sectors"]) /
            max(1, c["global_load_requests"] + c["global_store_requests"]))
        c["wavefronts_per_shared_request"] = c["bank_conflict_wavefronts"] / max(
            1, c["shared_requests"])
        c["max_global_loads_per_thread"] = int(self.per_thread["global_loads"].max(initial=0))
        c["max_global_stores_per_thread"] = int(self.per_thread["global_stores"].max(initial=0))
        c["threads_launched"] = self.config.n_blocks * self.tpb
        shape = (self.config.n_blocks, self.tpb)
        c["threads"] = {k: v.reshape(shape) for k, v in self.per_thread.items()}
        c["lines"] = [{"line": line, "space": space, "kind": kind, "requests": r,
                       ("sectors" if space == "global" else "wavefronts"): u}
                      for (space, kind, line), (r, u) in sorted(self.by_line.items(), key=lambda i: i[0][2])]
        return c


_SECTOR_SHIFT = SECTOR_BYTES.bit_length() - 1  # x >> shift == x // SECTOR_BYTES (int64)
_WARP_SHIFT = WARP.bit_length() - 1
_BANK_SHIFT = BANK_BYTES.bit_length() - 1


def _request_keys(space: str, kind: str) -> tuple[str, str]:
    """The counters of requests and of their cost (sectors or wavefronts) for an access kind."""
    if space == "global":
        return f"global_{kind}_requests", f"global_{kind}_sectors"
    return "shared_requests", "bank_conflict_wavefronts"


_REQUEST_KEYS = {(s, k): _request_keys(s, k) for s in ("global", "shared")
                 for k in ("load", "store", "atomic")}
_COUNT_KEYS = {(s, k): f"{s}_{'loads' if k == 'load' else 'stores'}"
               for s in ("global", "shared") for k in ("load", "store")}


def _flags(initialised: np.ndarray):
    """The initialised flags for indexing one element at a time from Python: a memoryview on
    the same memory (an item is a Python bool, several times cheaper than a numpy scalar)."""
    if initialised.dtype == np.bool_ and initialised.ndim == 1 and \
            initialised.flags.c_contiguous and initialised.flags.writeable:
        return memoryview(initialised)
    return initialised


_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}  # itemsize -> unsigned type


def _same_bits1(store: np.ndarray, flat: int, value) -> bool:
    """Does storing `value` at `store[flat]` (cast as the store casts it) leave its bits as
    they are? False when the cast fails (the store itself then reports it)."""
    tmp = np.empty(1, store.dtype)
    try:
        with np.errstate(all="ignore"):  # the store itself warns about a bad cast
            tmp[0] = value
    except Exception:
        return False
    return tmp.tobytes() == store[flat:flat + 1].tobytes()


def _same_bits_recorder(store: np.ndarray):
    """`_same_bits1` for one store, bound once: `same(flat, value)`, comparing the bits as
    Python ints through memoryviews where the item size allows."""
    u = _BITS.get(store.dtype.itemsize)
    if u is None or store.ndim != 1 or not store.flags.c_contiguous:
        return lambda flat, value: _same_bits1(store, flat, value)
    tmp = np.empty(1, store.dtype)
    tmp_bits, bits = memoryview(tmp.view(u)), memoryview(store.view(u))
    quiet_cast = store.dtype.kind in "iub"  # a float cast to an integer may warn: the store
    # warns, not this check

    def same(flat, value):
        try:
            if quiet_cast and isinstance(value, np.floating):
                with np.errstate(all="ignore"):
                    tmp[0] = value
            else:
                tmp[0] = value
        except Exception:
            return False
        return tmp_bits[0] == bits[flat]
    return same


def _quiet(handle, flat: np.ndarray, values, dups) -> np.ndarray | None:
    """The lanes of one store instruction that are not accesses for the race checker, or None
    when there are none: a lane storing the bits its (initialised) element already holds, and,
    where several lanes store one value to one element, every lane of that group but the last
    (sequentially, the first stores and the others are silent; the last is the one whose store
    lands, kept unless its value is already there). A group storing different values keeps all
    its lanes: that is a race. `dups`: `Instrument._dups` of the lanes (None for one lane)."""
    store = handle.flat
    n = flat.shape[0]
    try:
        if isinstance(values, np.ndarray) and values.ndim:
            if values.shape != (n,):
                return None
            if values.dtype == store.dtype:
                new = values
            else:
                with np.errstate(all="ignore"):  # the store itself warns about a bad cast
                    new = values.astype(store.dtype)
        else:
            new = np.empty((), store.dtype)
            with np.errstate(all="ignore"):
                new[()] = values
    except Exception:  # the store itself reports it
        return None
    f0 = int(flat[0])
    if n > 1 and int(flat[-1]) - f0 == n - 1 and bool((np.diff(flat) == 1).all()):
        old = store[f0:f0 + n]  # one run of elements (`out[i] = ...`): a view, no gather
    else:
        old = store[flat]
    u = _BITS.get(store.dtype.itemsize)
    if u is not None:
        old_bits, new_bits = old.view(u), new.view(u)
    else:  # compare byte rows
        old_bits = old.view(np.uint8).reshape(n, -1)
        new_bits = new.reshape(-1).view(np.uint8).reshape(-1, store.dtype.itemsize)
    eq = old_bits == new_bits
    if eq.ndim > 1:
        eq = eq.all(axis=1)
    pair = dups[0] if dups is not None else None
    if pair is None:
        if not eq.any():
            return None
        eq = eq & handle.initialised[flat]
        return eq if eq.any() else None
    eq = np.broadcast_to(eq, (n,)) & handle.initialised[flat]
    # groups of lanes on one element, in element order (stable: lane order within a group)
    idx = np.flatnonzero(dups[1])
    order = idx[np.argsort(flat[idx], kind="stable")]
    fs = flat[order]
    same = fs[1:] == fs[:-1]
    gid = np.concatenate((np.zeros(1, np.int64), np.cumsum(~same)))
    vs = np.broadcast_to(new_bits, (n,) + new_bits.shape[1:])[order]
    differ = vs[1:] != vs[:-1]
    if differ.ndim > 1:
        differ = differ.any(axis=1)
    mixed = np.zeros(int(gid[-1]) + 1, bool)
    mixed[gid[1:][same & differ]] = True
    quiet = eq.copy()
    quiet[order] = ~mixed[gid] & (np.append(same, False) | eq[order])
    return quiet if quiet.any() else None


def _squeeze(vec: np.ndarray):
    """(positions of shape (a, 1, c), the shape (a, r, c)) when `vec.reshape(a, r, c)` repeats
    its first row along axis 1 (r > 1: a tile row read by every row of threads, a tile column
    by every column, a global row by several blocks); else False. Then `vec`'s gather is the
    small one broadcast to (a, r, c)."""
    n = vec.shape[0]
    if n < 256:
        return False
    hits = np.flatnonzero(vec[1:] == vec[0])
    if hits.shape[0] == 0:
        return False
    c = int(hits[0]) + 1  # the period of the start
    differ = np.flatnonzero(vec[c:] != vec[:-c])
    rc = int(differ[0]) + c if differ.shape[0] else n  # how long the start repeats
    if rc % c or n % rc or rc // c < 2:
        return False
    m = vec.reshape(-1, rc // c, c)
    first = m[:, :1, :]
    if not (m == first).all():
        return False
    return np.ascontiguousarray(first), m.shape


def _pattern_key(handle, lanes, idx) -> tuple:
    """The `_patterns` key of an index: the handle, the lanes, and each vector part by id
    (None for a scalar part)."""
    if len(idx) == 2:
        i, j = idx
        return (id(handle), id(lanes), id(i) if isinstance(i, np.ndarray) and i.ndim else None,
                id(j) if isinstance(j, np.ndarray) and j.ndim else None)
    if len(idx) == 1:
        i = idx[0]
        return (id(handle), id(lanes), id(i) if isinstance(i, np.ndarray) and i.ndim else None)
    return (id(handle), id(lanes)) + tuple(
        id(i) if isinstance(i, np.ndarray) and i.ndim else None for i in idx)


def _vector_part(handle, idx, n: int):
    """(sum of the vector indices times their strides as a fresh int64 vector, or None when
    every index is a scalar; offset plus the scalar indices times their strides), or None when
    some index is out of bounds or not a plain integer (the caller then runs the full check)."""
    base = handle.offset
    vec = None
    for i, dim, st in zip(idx, handle.shape, handle.estrides):
        if isinstance(i, np.ndarray) and i.ndim:
            kind = _UNSIGNED.get(i.dtype)
            if kind is None or i.shape != (n,):
                return None
            unsigned, limit = kind
            if dim > limit:  # negative values would not wrap past the bound
                return None
            if n and int(i.view(unsigned).max()) >= dim:  # negative -> huge: one test
                return None
            if vec is None:
                vec = i.astype(np.int64) if st == 1 else np.multiply(i, st, dtype=np.int64)
            elif st == 1:
                vec += i
            else:
                vec += np.multiply(i, st, dtype=np.int64)
        else:
            try:
                i = int(i)
            except (TypeError, ValueError):
                return None
            if not 0 <= i < dim:
                return None
            base += i * st
    return vec, base


def _distinct_per_request(lanes: Lanes, key: np.ndarray) -> int:
    """Sum over the requests (warps) of ordered lanes of the number of distinct `key` values."""
    n = lanes.n
    if n == 0:
        return 0
    if lanes.rows:
        # np.diff(m, axis=1) with m = key.reshape(-1, WARP), as one contiguous difference
        # whose pairs across rows are zeroed (a zero changes neither test nor count)
        d = key[1:] - key[:-1]
        d[WARP - 1::WARP] = 0
        if int(d.min(initial=0)) < 0:
            d = np.diff(np.sort(key.reshape(-1, WARP), axis=1), axis=1)
        return lanes.n_req + int(np.count_nonzero(d))
    d = key[1:] - key[:-1]
    inner = np.ones(n - 1, bool)
    inner[lanes.starts[1:] - 1] = False  # pairs of lanes within one request
    if not (d[inner] < 0).any():
        return lanes.n_req + int(np.count_nonzero(d[inner]))
    k = key - key.min()
    span = int(k.max()) + 1
    if span * lanes.n_req >= 1 << 62:
        return int(np.unique(_combine(lanes.request_index(), key)).shape[0])
    k = lanes.request_index() * span + k
    k.sort()
    return 1 + int(np.count_nonzero(k[1:] != k[:-1]))


def _wavefronts_lanes(lanes: Lanes, addr: np.ndarray, itemsize: int) -> int:
    """`_wavefronts` of ordered lanes: one wavefront per request when each request's words lie
    within 32 consecutive words (so every word has a bank of its own)."""
    if lanes.n == 0:
        return 0
    word = addr >> _BANK_SHIFT  # addr // BANK_BYTES
    extra = max(1, itemsize // BANK_BYTES) - 1
    if lanes.rows:
        m = word.reshape(-1, WARP)
        lo, hi = m.min(axis=1), m.max(axis=1)
    else:
        lo = np.minimum.reduceat(word, lanes.starts)
        hi = np.maximum.reduceat(word, lanes.starts)
    if int((hi - lo).max()) + extra < BANKS:
        return lanes.n_req
    return _wavefronts_sorted(lanes.request_index(), lanes.n_req, addr, itemsize)


def _wavefronts_rows(addr: np.ndarray, itemsize: int) -> int:
    """Shared-memory wavefronts of requests, one request per row of `addr` (..., lanes)."""
    rows = addr.reshape(-1, addr.shape[-1])
    words_per = max(1, itemsize // BANK_BYTES)
    word = rows // BANK_BYTES
    # a request whose words span fewer than BANKS words meets each bank at most once
    narrow = word.max(axis=1) - word.min(axis=1) + words_per <= BANKS
    wide = rows[~narrow]
    total = int(narrow.sum())
    if wide.shape[0]:
        req = np.repeat(np.arange(wide.shape[0]), wide.shape[1])
        total += _wavefronts_sorted(req, wide.shape[0], wide.reshape(-1), itemsize)
    return total


def _wavefronts_sorted(req: np.ndarray, n_req: int, addr: np.ndarray, itemsize: int) -> int:
    """`_wavefronts` for request numbers 0..n_req-1, with a sort instead of hashing."""
    words_per = max(1, itemsize // BANK_BYTES)
    word = addr // BANK_BYTES
    wmin = int(word.min())
    span = int(word.max()) - wmin + words_per
    if span * n_req >= 1 << 62:
        return _wavefronts(req, addr, itemsize)
    if words_per > 1:
        word = (word[:, None] + np.arange(words_per)).reshape(-1)
        req = np.repeat(req, words_per)
    key = req * span + (word - wmin)
    key.sort()
    u = key[np.r_[True, key[1:] != key[:-1]]]  # distinct (request, word)
    bank = (u // span) * BANKS + (u % span + wmin) % BANKS
    per_bank = np.bincount(bank, minlength=n_req * BANKS).reshape(n_req, BANKS)
    return int(per_bank.max(axis=1).sum())


def _combine(*cols: np.ndarray) -> np.ndarray:
    """One int64 key per row of several non-negative int columns (dense re-coding first when
    the plain product of ranges could overflow)."""
    key = np.zeros(cols[0].shape[0], np.int64)
    span = 1
    for col in cols:
        col = col - col.min(initial=0)
        hi = int(col.max(initial=0)) + 1
        if span * hi >= 1 << 62:
            col = np.unique(col, return_inverse=True)[1].reshape(-1)
            key = np.unique(key, return_inverse=True)[1].reshape(-1)
            span, hi = int(key.max(initial=0)) + 1, int(col.max(initial=0)) + 1
        key = key * hi + col
        span *= hi
    return key


def _wavefronts(req: np.ndarray, addr: np.ndarray, itemsize) -> int:
    """Sum over requests of the most distinct 4-byte words in one bank (32 banks)."""
    itemsize = np.broadcast_to(np.asarray(itemsize, np.int64), addr.shape)
    words_per = np.maximum(1, itemsize // BANK_BYTES)
    reps = np.repeat(np.arange(addr.shape[0]), words_per)
    offs = np.arange(reps.shape[0]) - np.repeat(np.cumsum(words_per) - words_per, words_per)
    word = addr[reps] // BANK_BYTES + offs
    r = req[reps]
    r = r - r.min(initial=0)
    wmin = int(word.min())
    span = int(word.max()) - wmin + 1  # shared memory: at most 227 KiB of words
    uniq = np.unique(r * span + (word - wmin))  # distinct (request, word)
    u_req, u_word = uniq // span, uniq % span + wmin
    bank_key, per_bank = np.unique(u_req * BANKS + u_word % BANKS, return_counts=True)
    worst = np.zeros(int(u_req.max()) + 1, np.int64)
    np.maximum.at(worst, bank_key // BANKS, per_bank)
    return int(worst.sum())
