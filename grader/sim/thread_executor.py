"""Per-thread executor: one greenlet per CUDA thread, a deterministic scheduler per block.

Blocks run one after another. Inside a block every thread runs until it blocks (syncthreads,
a warp collective) or yields (atomics, fences, every few `while` iterations or long runs of
recorded loads, so that spin loops make progress), then the next runnable thread runs, in
thread order (or a seeded shuffle of it); a thread reaching a barrier hands over to the next
one directly. When nothing is runnable the scheduler completes warp rendezvous, then the
barrier, else reports a deadlock: the simulator never hangs on a kernel that waits forever.

The kernel runs as numba types it (`thread_typing`), its element accesses compiled inline
where they can be (`thread_access`); `ThreadArray` serves the rest. The fake `cuda` a kernel
sees reads the running thread from the executor, which is set before each switch (explicit
context, no thread-local lookups).
"""

from __future__ import annotations

import gc
import linecache
import re
import sys
import types
from collections import deque
from typing import NamedTuple

import numpy as np
from greenlet import greenlet

from . import device_math, kernel_source, patching, thread_access, thread_typing
from .errors import (BarrierDivergenceError, DeadlockError, LaunchConfigError,
                     NotSimulatedError, SimError, WarpOpError, where)
from .host import DeviceBuffer, _as_dtype
from .memory import WARP, LocalArray, SharedArray

# Forward progress: a thread yields at atomics and fences (spin locks), every
# thread_access.LOOP_TICKS iterations of a `while` loop and every LOADS_PER_YIELD recorded
# loads (flag loops). "Progress" is a store, an atomic that changed memory, an exit, or a
# completed barrier / warp op. This many yields without progress is a deadlock:
IDLE_SYNC_YIELDS = 256  # atomic / fence yields in a row
IDLE_LOAD_YIELDS = 16384  # loop / load-budget yields in a row (4M without any store)
LOADS_PER_YIELD = 256
# the access logs are counted every this many site lists (compiled accesses) or recorded accesses
FLUSH_SITES, FLUSH_ACCESSES = 16384, 1 << 20
FULL_MASK = 0xFFFFFFFF
_SYNC = ("sync", None)  # the request of a plain syncthreads()
_getframe = sys._getframe


class Dim3(NamedTuple):
    x: int
    y: int
    z: int


class ThreadState:
    __slots__ = ("lin", "idx", "lane", "warp", "glet", "status", "wait", "value", "loads",
                 "explicit_exit", "g")

    def __init__(self, lin: int, idx: Dim3, g: int = 0):
        self.lin, self.idx = lin, idx
        self.g = g  # global thread id: block * threads_per_block + lin
        self.lane, self.warp = lin % WARP, lin // WARP
        self.glet = None
        self.status = "ready"  # ready | barrier | warp | exited
        self.wait = None  # the request a blocked thread waits on
        self.value = None  # what its blocking call returns when resumed
        self.loads = 0
        self.explicit_exit = False


class _View:
    """A sub-array of a handle (partial indexing or a slice): same storage, new layout."""

    def __init__(self, base, offset, shape, estrides):
        self.name, self.flat, self.initialised = base.name, base.flat, base.initialised
        self.dtype, self.buffer_id, self.address = base.dtype, base.buffer_id, base.address
        self.first_block = getattr(base, "first_block", 0)
        self.block_stride = getattr(base, "block_stride", 0)
        self.offset, self.shape, self.estrides = offset, tuple(shape), tuple(estrides)


class ThreadArray:
    """An array as one simulated thread indexes it: every element access is instrumented."""

    __slots__ = ("_h", "_space", "_ex", "shape", "ndim", "size", "dtype", "_store", "_off",
                 "_strides", "_bid", "_load1", "_store1", "_unpacked")

    def __init__(self, handle, space: str, ex: "ThreadExecutor"):
        self._h, self._space, self._ex = handle, space, ex
        self.shape = tuple(handle.shape)
        self.ndim = len(self.shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.dtype = handle.dtype
        # the fast path of __getitem__ / __setitem__ (plain int indices, in bounds): what
        # `Instrument.index1` computes, with the block's shared copy fixed (`_bid`)
        self._store = handle.flat
        self._strides = tuple(int(s) for s in handle.estrides)
        self._off = int(handle.offset)
        self._bid = None
        if space == "shared":
            self._bid = ex.bid
            self._off += (ex.bid - handle.first_block) * handle.block_stride
        self._load1 = ex.inst.scalar_recorder(space, handle, "load")
        self._store1 = ex.inst.scalar_recorder(space, handle, "store")
        self._unpacked = None  # what compiled accesses unpack (ThreadExecutor.unpack), once

    def __len__(self):
        return self.shape[0]

    def _flat(self, key, kind, frame, value=None):
        """Flat position of a full index (checked and recorded), or None for a view key.
        `value`: what a store stores (the race checker's silent-store rule)."""
        if type(key) is not tuple:
            key = (key,)
        if len(key) != self.ndim:
            return None
        ex = self._ex
        lin = ex.cur.lin
        line = frame.f_lineno
        filename = frame.f_code.co_filename
        try:
            flat = ex.inst.index1(self._space, self._h, key, ex.bid, lin, line, filename)
        except TypeError:
            if any(isinstance(k, slice) for k in key):
                return None
            raise
        ex.inst.access1(self._space, self._h, kind, flat, ex.bid, lin, line, filename, value)
        return flat

    def _fast(self, key):
        """`Instrument.index1` for plain int indices that are in bounds; None otherwise (the
        full path then checks, reports and records)."""
        shape = self.shape
        if key.__class__ is int:
            if len(shape) == 1 and 0 <= key < shape[0]:
                return self._off + key * self._strides[0]
            return None
        if key.__class__ is not tuple or len(key) != len(shape):
            return None
        flat = self._off
        for i, dim, st in zip(key, shape, self._strides):
            if i.__class__ is not int or not 0 <= i < dim:
                return None
            flat += i * st
        return flat

    def __getitem__(self, key):
        frame = _getframe(1)
        rec = self._load1
        if rec is not None and (self._bid is None or self._bid == self._ex.bid):
            # the fast path, inline for the common shapes (a call costs as much as the rest)
            flat = None
            if key.__class__ is tuple:
                if len(key) == 2 and self.ndim == 2:
                    i, j = key
                    if i.__class__ is int and j.__class__ is int:
                        d0, d1 = self.shape
                        if 0 <= i < d0 and 0 <= j < d1:
                            s0, s1 = self._strides
                            flat = self._off + i * s0 + j * s1
                else:
                    flat = self._fast(key)
            elif key.__class__ is int and self.ndim == 1 and 0 <= key < self.shape[0]:
                flat = self._off + key * self._strides[0]
            if flat is not None:
                st = self._ex.cur
                rec(flat, st.g, frame)
                st.loads += 1
                if st.loads >= LOADS_PER_YIELD:
                    st.loads = 0
                    self._ex.hub.switch("yield_loads")
                return self._store[flat]
        flat = self._flat(key, "load", frame)
        if flat is None:
            return self._view(key, frame)
        st = self._ex.cur
        st.loads += 1
        if st.loads >= LOADS_PER_YIELD:
            st.loads = 0
            self._ex.hub.switch("yield_loads")
        return self._h.flat[flat]

    def __setitem__(self, key, value):
        frame = sys._getframe(1)
        if value.__class__ is int and self.dtype.kind in "iu":
            value = thread_typing.converter(self.dtype.type)(value)  # wrapped, as numba stores
        if self._space == "const":
            raise SimError(f"{where(self._ex.name, frame.f_code.co_filename, frame.f_lineno)}: "
                           f"store to constant array {self._h.name!r}")
        rec = self._store1
        if rec is not None and (self._bid is None or self._bid == self._ex.bid):
            flat = None
            if key.__class__ is tuple:
                if len(key) == 2 and self.ndim == 2:
                    i, j = key
                    if i.__class__ is int and j.__class__ is int:
                        d0, d1 = self.shape
                        if 0 <= i < d0 and 0 <= j < d1:
                            s0, s1 = self._strides
                            flat = self._off + i * s0 + j * s1
                else:
                    flat = self._fast(key)
            elif key.__class__ is int and self.ndim == 1 and 0 <= key < self.shape[0]:
                flat = self._off + key * self._strides[0]
            if flat is not None:
                rec(flat, self._ex.cur.g, frame, value)
                self._store[flat] = value
                self._ex.progress += 1
                return
        flat = self._flat(key, "store", frame, value)
        if flat is None:
            raise NotSimulatedError("assignment to a slice of an array inside a kernel is not "
                                    "simulated; store element by element")
        self._h.flat[flat] = value
        self._ex.progress += 1

    def _view(self, key, frame):
        if type(key) is not tuple:
            key = (key,)
        h = self._h
        offset, shape, strides = h.offset, [], []
        for k, (dim, st) in enumerate(zip(h.shape, h.estrides)):
            if k >= len(key):
                shape.append(dim)
                strides.append(st)
                continue
            i = key[k]
            if isinstance(i, slice):
                start, stop, step = i.indices(dim)
                shape.append(len(range(start, stop, step)))
                strides.append(st * step)
                offset += start * st
            else:
                if not 0 <= i < dim:
                    self._ex.inst._oob(h, self._space, tuple(key), self._ex.bid, self._ex.cur.lin,
                                       frame.f_lineno, frame.f_code.co_filename)
                offset += i * st
        return ThreadArray(_View(h, offset, shape, strides), self._space, self._ex)


# ---------------------------------------------------------------- the kernel-side API
class _Shared:
    def __init__(self, ex):
        self._ex = ex

    def array(self, shape, dtype):
        return self._ex.shared_array(shape, dtype, sys._getframe(1))


class _Local:
    def __init__(self, ex):
        self._ex = ex

    def array(self, shape, dtype):
        shape = (shape,) if np.ndim(shape) == 0 else tuple(shape)
        return ThreadArray(LocalArray("local array", shape, _as_dtype(dtype)), "local", self._ex)


class _Const:
    def __init__(self, ex):
        self._ex = ex

    def array_like(self, ary):
        return self._ex.const_array(ary)


class _Atomic:
    """cuda.atomic: read-modify-write returning the old value, then a yield (spin loops)."""

    def __init__(self, ex):
        self._ex = ex

    def _rmw(self, ary, idx, fn, frame):
        ex = self._ex
        if not isinstance(ary, ThreadArray):
            raise SimError(f"{where(ex.name, frame.f_code.co_filename, frame.f_lineno)}: "
                           f"atomic on something that is not an array ({type(ary).__name__})")
        flat = ary._flat(idx, "atomic", frame)
        if flat is None:
            raise SimError(f"{where(ex.name, frame.f_code.co_filename, frame.f_lineno)}: "
                           f"atomic on array {ary._h.name!r} needs one index per dimension")
        store = ary._h.flat
        old = store[flat]
        new = fn(old)
        store[flat] = new
        if new != old:
            ex.progress += 1
        ex.yield_()
        return old

    def add(self, ary, idx, val):
        return self._rmw(ary, idx, lambda o: o + val, sys._getframe(1))

    def sub(self, ary, idx, val):
        return self._rmw(ary, idx, lambda o: o - val, sys._getframe(1))

    def max(self, ary, idx, val):
        return self._rmw(ary, idx, lambda o: max(o, val), sys._getframe(1))

    def min(self, ary, idx, val):
        return self._rmw(ary, idx, lambda o: min(o, val), sys._getframe(1))

    def nanmax(self, ary, idx, val):
        return self._rmw(ary, idx, lambda o: np.fmax(o, val), sys._getframe(1))

    def nanmin(self, ary, idx, val):
        return self._rmw(ary, idx, lambda o: np.fmin(o, val), sys._getframe(1))

    def inc(self, ary, idx, val):
        return self._rmw(ary, idx, lambda o: 0 if o >= val else o + 1, sys._getframe(1))

    def dec(self, ary, idx, val):
        return self._rmw(ary, idx, lambda o: val if (o == 0 or o > val) else o - 1,
                         sys._getframe(1))

    def exch(self, ary, idx, val):
        return self._rmw(ary, idx, lambda o: val, sys._getframe(1))

    def and_(self, ary, idx, val):
        return self._rmw(ary, idx, lambda o: o & val, sys._getframe(1))

    def or_(self, ary, idx, val):
        return self._rmw(ary, idx, lambda o: o | val, sys._getframe(1))

    def xor(self, ary, idx, val):
        return self._rmw(ary, idx, lambda o: o ^ val, sys._getframe(1))

    def cas(self, ary, idx, old, val):
        return self._rmw(ary, idx, lambda o: val if o == old else o, sys._getframe(1))

    def compare_and_swap(self, ary, old, val):
        return self._rmw(ary, 0, lambda o: val if o == old else o, sys._getframe(1))


setattr(_Atomic, "and", _Atomic.and_)
setattr(_Atomic, "or", _Atomic.or_)


class ThreadCuda:
    """The `cuda` a kernel sees under the per-thread executor."""

    API_NAMES = (
        "threadIdx", "blockIdx", "blockDim", "gridDim", "laneid", "warpsize", "grid",
        "gridsize", "shared", "local", "const", "atomic", "syncthreads", "syncthreads_count",
        "syncthreads_and", "syncthreads_or", "threadfence", "threadfence_block",
        "threadfence_system", "syncwarp", "shfl_sync", "shfl_up_sync", "shfl_down_sync",
        "shfl_xor_sync", "ballot_sync", "all_sync", "any_sync", "eq_sync", "match_any_sync",
        "match_all_sync", "activemask", "lanemask_lt", "popc", "brev", "clz", "ffs", "fma",
        "cbrt", "selp", "nanosleep", "fp16",
    )
    # cuda.fp16: half-precision intrinsics (the same functions as the SIMT executor's)
    fp16 = types.SimpleNamespace(**device_math.FP16)

    def __init__(self, ex: "ThreadExecutor"):
        self._ex = ex
        self.shared = _Shared(ex)
        self.local = _Local(ex)
        self.const = _Const(ex)
        self.atomic = _Atomic(ex)
        self.warpsize = WARP
        self.blockDim = Dim3(*ex.config.block)
        self.gridDim = Dim3(*ex.config.grid)

    threadIdx = property(lambda self: self._ex.cur.idx)
    blockIdx = property(lambda self: self._ex.bidx)
    laneid = property(lambda self: self._ex.cur.lane)

    def __getattr__(self, name):
        real = getattr(patching.cuda_module(), name)
        if isinstance(real, type) or type(real).__module__.startswith(("numba.core.types",
                                                                       "numba.cuda.types")) \
                or name in ("float16", "bfloat16"):
            return real
        raise NotSimulatedError(f"cuda.{name} is not simulated")

    # --- indexing helpers
    def grid(self, ndim):
        ex, t = self._ex, self._ex.cur.idx
        b, d = ex.bidx, self.blockDim
        x = b.x * d.x + t.x
        if ndim == 1:
            return x
        y = b.y * d.y + t.y
        if ndim == 2:
            return x, y
        return x, y, b.z * d.z + t.z

    def gridsize(self, ndim):
        g, d = self.gridDim, self.blockDim
        if ndim == 1:
            return g.x * d.x
        if ndim == 2:
            return g.x * d.x, g.y * d.y
        return g.x * d.x, g.y * d.y, g.z * d.z

    # --- barriers and fences
    def syncthreads(self):
        self._ex.sync(sys._getframe(1))

    def syncthreads_count(self, pred):
        return self._ex.block_on("barrier", ("count", bool(pred)), sys._getframe(1))

    def syncthreads_and(self, pred):
        return self._ex.block_on("barrier", ("and", bool(pred)), sys._getframe(1))

    def syncthreads_or(self, pred):
        return self._ex.block_on("barrier", ("or", bool(pred)), sys._getframe(1))

    def threadfence(self):
        self._ex.fence()

    threadfence_block = threadfence_system = threadfence

    def nanosleep(self, ns):
        self._ex.yield_()

    # --- warp collectives (Volta+: a rendezvous of the lanes named in the mask)
    def _warp(self, op, mask, value=None, arg=None):
        return self._ex.block_on("warp", (op, int(mask), value, arg), sys._getframe(2))

    def syncwarp(self, mask=FULL_MASK):
        self._warp("syncwarp", mask)

    def shfl_sync(self, mask, value, src_lane):
        return self._warp("shfl_sync", mask, value, int(src_lane))

    def shfl_up_sync(self, mask, value, delta):
        return self._warp("shfl_up_sync", mask, value, int(delta))

    def shfl_down_sync(self, mask, value, delta):
        return self._warp("shfl_down_sync", mask, value, int(delta))

    def shfl_xor_sync(self, mask, value, lane_mask):
        return self._warp("shfl_xor_sync", mask, value, int(lane_mask))

    def ballot_sync(self, mask, predicate):
        return self._warp("ballot_sync", mask, bool(predicate))

    def all_sync(self, mask, predicate):
        return self._warp("all_sync", mask, bool(predicate))

    def any_sync(self, mask, predicate):
        return self._warp("any_sync", mask, bool(predicate))

    def eq_sync(self, mask, value):
        return self._warp("eq_sync", mask, value)

    def match_any_sync(self, mask, value):
        return self._warp("match_any_sync", mask, value)

    def match_all_sync(self, mask, value):
        return self._warp("match_all_sync", mask, value)

    def activemask(self):
        # the lanes that reach this call together: a rendezvous closed when nothing else runs
        return self._warp("activemask", 1 << self._ex.cur.lane)

    def lanemask_lt(self):
        return (1 << self._ex.cur.lane) - 1

    # --- integer and float intrinsics
    @staticmethod
    def popc(x):
        bits = x.dtype.itemsize * 8 if isinstance(x, np.integer) else 64  # a Python int: int64
        return bin(int(x) & ((1 << bits) - 1)).count("1")

    @staticmethod
    def brev(x):
        bits = 64 if isinstance(x, (np.int64, np.uint64)) else 32
        return int(f"{int(x) & ((1 << bits) - 1):0{bits}b}"[::-1], 2)

    @staticmethod
    def clz(x):
        bits = 64 if isinstance(x, (np.int64, np.uint64)) else 32
        v = int(x) & ((1 << bits) - 1)
        return bits - v.bit_length()

    @staticmethod
    def ffs(x):
        v = int(x) & 0xFFFFFFFFFFFFFFFF
        return (v & -v).bit_length()

    @staticmethod
    def fma(a, b, c):
        return a * b + c

    @staticmethod
    def cbrt(x):
        return np.cbrt(x)

    @staticmethod
    def selp(pred, a, b):
        return a if pred else b


def _no_check(flat, g, frame, value=None):
    """The checker of an array nothing checks (local, constant)."""


def _int32(mask: int) -> np.int32:
    """A 32-bit lane mask as numba's int32 (lane 31 set: negative)."""
    return np.int32(mask - (1 << 32) if mask & 0x80000000 else mask)


# ---------------------------------------------------------------- the executor
_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)\s*=")


class ThreadExecutor:
    """Runs one launch (a `launch.Launch`) thread by thread."""

    compile_accesses = True  # off: every access through ThreadArray (tests compare the two)

    def __init__(self, launch):
        self.launch = launch
        self.config = launch.config
        self.inst = launch.instrument
        self.name = launch.kernel.name
        self.tpb = self.config.threads_per_block
        self.rng = np.random.default_rng(launch.seed) if launch.seed is not None else None
        self.cur: ThreadState | None = None
        self.bid = 0
        self.bidx = Dim3(0, 0, 0)
        self.cuda = ThreadCuda(self)
        # numba's types for the kernel's values (raises TypingRefused when numba refuses it)
        typer = thread_typing.for_launch(launch.kernel.py_func, launch.args)
        if typer.enabled:
            # element accesses compiled inline: counted from per-thread lists, or, where a
            # checker needs every access in order (races, uninitialised reads), recorded
            if self.compile_accesses:
                typer.access = "record" if self.inst.races or self.inst.uninit else "count"
            typer.globals.update(__gg_ex=self, __gg_unpack=self.unpack, __gg_spin=self.spin,
                                 __gg_thread_id=self.thread_id)
        self._sink: list = []  # what local and constant arrays' compiled accesses log
        self._site_lines: dict = {}  # (id(code), f_lasti) -> line of a blocking call
        self.fn = kernel_source.rebind(launch.kernel.py_func, self.cuda, mark_end=True,
                                       typer=typer if typer.enabled else None)
        self.typing_note = typer.note  # kernel_code notes a kernel without source
        self.thread_idx = [Dim3(*self.config.thread_xyz(t)) for t in range(self.tpb)]
        self.thread_order = list(range(self.tpb))
        self.pool: list[greenlet] = []
        self.args = [ThreadArray(a, "global", self) if isinstance(a, DeviceBuffer) else a
                     for a in launch.args]
        self._const: dict[int, ThreadArray] = {}
        self.hub = None

    # --- entry point
    def run(self) -> None:
        blocks = np.arange(self.config.n_blocks)
        if self.rng is not None:
            self.rng.shuffle(blocks)
        # a launch makes lists (access logs, waits) by the hundred thousand, and the cyclic
        # garbage collector would scan them again and again (~10% of a launch); what cycles a
        # launch leaves are collected after it
        collecting = gc.isenabled()
        gc.disable()
        self.site_logs: list = []  # (g, line, slot code, log list) of the compiled accesses
        try:
            for b in blocks.tolist():
                self._run_block(b)
                # counted in batches of blocks: a count has a fixed cost of its own
                if len(self.site_logs) >= FLUSH_SITES or self.inst.pending() >= FLUSH_ACCESSES:
                    self._flush()
            self._flush()
        finally:
            if collecting:
                gc.enable()

    def _flush(self) -> None:
        self.inst.flush(self.site_logs)
        self.site_logs = []
        self._sink.clear()

    def _worker(self, _first):
        """Body of a pooled greenlet: runs one thread after another (a fresh greenlet per
        thread costs ~10x a switch). The scheduler sets `self.cur` before each switch."""
        while True:
            fell_off = self.fn(*self.args) is kernel_source.FELL_OFF
            self.hub.switch(("exit", fell_off))

    def _run_block(self, b: int) -> None:
        cfg = self.config
        self.bid, self.bidx = b, Dim3(*cfg.block_xyz(b))
        self.shared: dict = {}
        self.dynamic: dict = {}
        self.shared_offset = 0
        self.threads = [ThreadState(t, idx, b * self.tpb + t)
                        for t, idx in enumerate(self.thread_idx)]
        self.warp_waiters = 0  # threads blocked in a warp collective
        order = self.thread_order
        if self.rng is not None:
            order = list(order)
            self.rng.shuffle(order)
        self.order = order
        self.hub = greenlet.getcurrent()
        pool = self.pool
        runnable = self.runnable = deque(self.threads[t] for t in order)
        self.progress = 0
        seen = -1  # progress at the last yield
        idle_sync = idle_loads = 0
        self.fell_off: list[ThreadState] = []  # exited by running off the end, this epoch
        completed = False
        try:
            while True:
                while runnable:
                    st = runnable.popleft()
                    self.cur = st
                    if st.glet is None:
                        st.glet = pool.pop() if pool else greenlet(self._worker, self.hub)
                        event = st.glet.switch(st)
                    else:
                        event = st.glet.switch(st.value)
                    st = self.cur  # who switched back: threads hand over at barriers (`sync`)
                    if event.__class__ is tuple:  # ("exit", fell_off)
                        st.status = "exited"
                        if event[1]:
                            self.fell_off.append(st)
                        pool.append(st.glet)
                        st.glet = None
                        self.progress += 1
                    elif event == "yield" or event == "yield_loads":
                        if self.progress != seen:
                            seen, idle_sync, idle_loads = self.progress, 0, 0
                        elif event == "yield":
                            idle_sync += 1
                        else:
                            idle_sync, idle_loads = 0, idle_loads + 1
                        if idle_sync > IDLE_SYNC_YIELDS or idle_loads > IDLE_LOAD_YIELDS:
                            self._no_progress()
                        runnable.append(st)
                    # else: it blocked; its status and wait are set
                if all(st.status == "exited" for st in self.threads):
                    completed = True
                    return
                if self.warp_waiters and self._complete_warps(runnable) or \
                        self._complete_barrier(runnable):
                    self.progress += 1
                    continue
                self._deadlock()
        finally:
            self.cur = None
            if not completed:  # greenlets suspended in an aborted block: drop, never resume
                self.pool = []
                for st in self.threads:
                    st.glet = None

    # --- blocking calls made from inside a thread
    def block_on(self, status: str, request, frame):
        st = self.cur
        st.status = status
        st.wait = (request, self._line_of(frame), frame.f_code.co_filename)
        if status == "warp":
            self.warp_waiters += 1
            op, mask = request[0], request[1]
            if not mask >> st.lane & 1:
                self._warp_error(st, frame, f"{op} called with mask {mask:#010x}, which does "
                                 f"not include the calling lane {st.lane}")
                # downgraded to a warning: carry on as if the caller were in the mask
                st.wait = ((op, mask | 1 << st.lane) + request[2:], frame.f_lineno,
                           frame.f_code.co_filename)
        st.value = None
        self.hub.switch("blocked")
        return st.value

    def sync(self, frame) -> None:
        """`block_on("barrier", _SYNC, frame)`, for the most common blocking call."""
        st = self.cur
        st.status = "barrier"
        st.wait = (_SYNC, self._line_of(frame), frame.f_code.co_filename)
        st.value = None
        runnable = self.runnable
        if not runnable or runnable[0].glet is None:
            # the last to arrive (the scheduler completes the barrier), or the next thread has
            # not started (a greenlet started from this one would count its Python stack on
            # top of this one's)
            self.hub.switch("blocked")
            return
        # hand over to the next runnable thread directly: one switch instead of two
        nxt = self.cur = runnable.popleft()
        nxt.glet.switch(nxt.value)

    def _line_of(self, frame) -> int:
        """`frame.f_lineno`, which walks the code's line table: each call site looked up once
        (by code id: a code object hashes its contents)."""
        site = (id(frame.f_code), frame.f_lasti)
        line = self._site_lines.get(site)
        if line is None:
            line = self._site_lines[site] = frame.f_lineno
        return line

    def yield_(self) -> None:
        self.hub.switch("yield")

    def fence(self) -> None:
        self.inst.fence(self.bid, self.cur.lin)
        self.yield_()

    def spin(self) -> None:
        """A loop's yield (thread_access.tick): judged like the load budget's."""
        self.hub.switch("yield_loads")

    # --- compiled accesses (thread_access)
    def unpack(self, ary, ndim: int, contiguous: bool, sites: tuple, checked: bool) -> tuple:
        """The locals the compiled accesses of `ary` read (`thread_access.ArrayAccesses`):
        layout; with `checked`, the array's load and store checkers
        (`Instrument.scalar_checker`, called with a `thread_access.Site` for the frame); one
        fresh log list (its append) per site ((line, is_store)), registered for the count.
        Code compiled for a C-contiguous array reads its last stride as 1. An array the fast
        path does not cover fails every bounds test."""
        if ary.__class__ is not ThreadArray or ary.ndim != ndim or \
                contiguous and ary._strides[-1] != 1 or \
                ary._bid is not None and ary._bid != self.bid:
            return thread_access.unbound_fields(ndim, 2 * checked + len(sites))
        fast = ary._unpacked
        if fast is None:
            fast = ary._unpacked = self._fast_fields(ary)
        head, codes, checkers = fast
        if checked:
            head += checkers
        if codes is None:
            return head + (self._sink.append,) * len(sites)
        g, register, logs = self.cur.g, self.site_logs.append, []
        for line, store in sites:
            log = []
            register((g, line, codes[store], log))
            logs.append(log.append)
        return head + tuple(logs)

    def thread_id(self) -> int:
        return self.cur.g

    def _fast_fields(self, ary):
        """(layout fields, (load code, store code) of its log entries or None: not counted,
        (load checker, store checker))."""
        codes = None
        if ary._space in ("global", "shared"):
            slot = self.inst.slot(ary._space, ary._h)
            codes = (slot, slot + 1)
        checkers = tuple(self.inst.scalar_checker(ary._space, ary._h, kind) or _no_check
                         for kind in ("load", "store"))
        return ((ary._store, ary._off, *ary._strides, *ary.shape, ary._space != "const"),
                codes, checkers)

    # --- memory spaces
    def shared_array(self, shape, dtype, frame):
        key = (id(frame.f_code), frame.f_lasti)  # (a code object hashes its contents)
        arr = self.shared.get(key)
        if arr is not None:
            return arr
        shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
        dtype = _as_dtype(dtype)
        name = self._name_at(frame, "shared array")
        if shape in ((0,), ()) or int(np.prod(shape)) == 0:
            handle = self._dynamic_shared(dtype, name)
        else:
            size = int(np.prod(shape)) * dtype.itemsize
            start = -(-self.shared_offset // dtype.itemsize) * dtype.itemsize
            self.shared_offset = start + size
            self._check_shared(frame)
            handle = SharedArray(name, shape, dtype, first_block=self.bid, address=start)
        arr = self.shared[key] = ThreadArray(handle, "shared", self)
        return arr

    def _dynamic_shared(self, dtype, name):
        """Every dynamic shared array starts at the same address, as `extern __shared__`
        arrays do; arrays of one dtype are one handle (so races between them are seen)."""
        handle = self.dynamic.get(dtype)
        if handle is not None:
            return handle
        n = self.config.shared_bytes // dtype.itemsize
        if "bytes" not in self.dynamic:
            self.dynamic["bytes"] = np.full(self.config.shared_bytes, 0xFF, np.uint8)
        store = self.dynamic["bytes"][:n * dtype.itemsize].view(dtype)
        handle = SharedArray(name, (n,), dtype, first_block=self.bid, flat=store)
        self.dynamic[dtype] = handle
        return handle

    def _check_shared(self, frame):
        lim = self.launch.device_limits
        static, dyn = self.shared_offset, self.config.shared_bytes
        if static > lim.default_shared_bytes or static + dyn > lim.max_shared_bytes_optin:
            raise LaunchConfigError(
                f"{where(self.name, frame.f_code.co_filename, frame.f_lineno)}: the block needs "
                f"{static} bytes of static + {dyn} bytes of dynamic shared memory; the limit is "
                f"{lim.default_shared_bytes} bytes static and {lim.max_shared_bytes_optin} in "
                f"total", kernel=self.name, filename=frame.f_code.co_filename,
                line=frame.f_lineno)

    def const_array(self, ary):
        arr = self._const.get(id(ary))
        if arr is None:
            data = np.ascontiguousarray(ary.copy_to_host() if hasattr(ary, "copy_to_host")
                                        else ary)
            handle = LocalArray("constant array", data.shape, data.dtype)
            handle.flat[:] = data.reshape(-1)
            arr = self._const[id(ary)] = ThreadArray(handle, "const", self)
        return arr

    @staticmethod
    def _name_at(frame, default):
        m = _ASSIGN.match(linecache.getline(frame.f_code.co_filename, frame.f_lineno))
        return m.group(1) if m else f"{default} at line {frame.f_lineno}"

    # --- completing rendezvous (called by the scheduler when nothing is runnable)
    def _complete_barrier(self, runnable) -> bool:
        live = [st for st in self.threads if st.status != "exited"]
        if not live or any(st.status != "barrier" for st in live):
            return False
        _, line, filename = live[0].wait
        if any(st.wait[1] != line or st.wait[2] != filename for st in live):
            lines = {(st.wait[2], st.wait[1]) for st in live}
            (f1, l1), (f2, l2) = sorted(lines)[:2]
            st = next(s for s in live if (s.wait[2], s.wait[1]) == (f2, l2))
            self._barrier_error(st, f"threads of the block wait at different syncthreads() "
                                f"calls ({f1}:{l1} and {f2}:{l2})")
        if self.fell_off:
            st = self.fell_off[0]
            self._barrier_error(st, f"this thread finished the kernel without reaching the "
                                f"syncthreads() at {live[0].wait[2]}:{live[0].wait[1]} that "
                                f"{len(live)} other threads of its block wait at (a barrier "
                                f"inside a condition that not all threads take)",
                                at=(live[0].wait[2], live[0].wait[1]))
            self.fell_off = []
        kind = live[0].wait[0][0]
        result = None
        if kind != "sync":
            preds = [st.wait[0][1] for st in live]
            result = {"count": sum(bool(p) for p in preds), "and": int(all(preds)),
                      "or": int(any(preds))}[kind]
        self.inst.barrier([self.bid], line)
        self.fell_off = []
        for t in self.order:
            st = self.threads[t]
            if st.status == "barrier":
                st.status, st.value, st.wait = "ready", result, None
                runnable.append(st)
        return True

    def _complete_warps(self, runnable) -> bool:
        done = False
        n_warps = (self.tpb + WARP - 1) // WARP
        for w in range(n_warps):
            lanes = self.threads[w * WARP:(w + 1) * WARP]
            # activemask: the lanes waiting at the same call (one line: lanes that took the
            # other side of a branch wait at another call and are not active here)
            sites: dict = {}
            for st in lanes:
                if st.status == "warp" and st.wait[0][0] == "activemask":
                    sites.setdefault((st.wait[2], st.wait[1]), []).append(st)
            for converged in sites.values():
                mask = sum(1 << st.lane for st in converged)
                for st in converged:
                    st.status, st.wait, st.value = "ready", None, mask
                    runnable.append(st)
                done = True
            waiting = [st for st in lanes if st.status == "warp"]
            while waiting:
                first = waiting[0]
                op, mask = first.wait[0][0], first.wait[0][1]
                group = [st for st in lanes if mask >> st.lane & 1 and st.status != "exited"]
                if any(st.status != "warp" for st in group):
                    break
                for st in group:
                    if st.wait[0][0] != op or st.wait[0][1] != mask:
                        self._warp_error(st, None, f"lanes of warp {w} meet at different warp "
                                         f"operations: {op} with mask {mask:#010x} and "
                                         f"{st.wait[0][0]} with mask {st.wait[0][1]:#010x}")
                self._warp_results(w, op, group)
                self.inst.warp_op(op, len(group), first.wait[1])
                if op == "syncwarp":
                    self.inst.syncwarp(self.bid, w)
                for st in group:
                    st.status, st.wait = "ready", None
                    runnable.append(st)
                done = True
                waiting = [st for st in lanes if st.status == "warp"]
        self.warp_waiters = sum(st.status == "warp" for st in self.threads)
        return done

    def _warp_results(self, w, op, group):
        by_lane = {st.lane: st for st in group}
        member_mask = sum(1 << lane for lane in by_lane)

        def read(st, src):
            if src not in by_lane:
                self._warp_error(st, None, f"{op} in lane {st.lane} reads lane {src}, which "
                                 f"does not take part (not in the mask, exited, or beyond the "
                                 f"block's last thread): the value would be undefined")
                return st.wait[0][2]  # downgraded: an undefined value, here the lane's own
            return by_lane[src].wait[0][2]

        for st in group:
            _, mask, value, arg = st.wait[0]
            if op == "shfl_sync":
                st.value = read(st, arg % WARP)
            elif op == "shfl_up_sync":
                st.value = value if st.lane - arg < 0 else read(st, st.lane - arg)
            elif op == "shfl_down_sync":
                st.value = value if st.lane + arg >= WARP else read(st, st.lane + arg)
            elif op == "shfl_xor_sync":
                src = st.lane ^ arg
                st.value = value if src >= WARP else read(st, src)
            # result types as numba types them: lane masks int32, votes bool
            elif op == "ballot_sync":
                st.value = _int32(sum(1 << s.lane for s in group if s.wait[0][2]))
            elif op == "all_sync":
                st.value = np.bool_(all(s.wait[0][2] for s in group))
            elif op == "any_sync":
                st.value = np.bool_(any(s.wait[0][2] for s in group))
            elif op == "eq_sync":
                st.value = np.bool_(all(s.wait[0][2] == value for s in group))
            elif op == "match_any_sync":
                st.value = _int32(sum(1 << s.lane for s in group if s.wait[0][2] == value))
            elif op == "match_all_sync":
                same = all(s.wait[0][2] == value for s in group)
                st.value = (_int32(member_mask if same else 0), np.bool_(same))
            else:  # syncwarp
                st.value = None

    # --- diagnostics
    def _report(self, cls, st, frame, what, at=None):
        if at is not None:
            fn, line = at
        elif frame is not None:
            fn, line = frame.f_code.co_filename, frame.f_lineno
        elif st.wait is not None:
            fn, line = st.wait[2], st.wait[1]
        else:
            fn, line = self.launch.kernel.filename, self.launch.kernel.firstlineno
        if not self.inst.checks.enabled(cls.check):
            return
        err = cls(f"{where(self.name, fn, line, self.bidx, st.idx)}: {what}", kernel=self.name,
                  filename=fn, line=line, block=tuple(self.bidx), thread=tuple(st.idx))
        self.inst.checks.report(err, self.inst.warnings)

    def _warp_error(self, st, frame, what):
        self._report(WarpOpError, st, frame, what)

    def _barrier_error(self, st, what, at=None):
        self._report(BarrierDivergenceError, st, None, what, at)

    def _deadlock(self):
        blocked = [st for st in self.threads if st.status in ("barrier", "warp")]
        at_warp = [st for st in blocked if st.status == "warp"]
        at_bar = [st for st in blocked if st.status == "barrier"]
        st = at_warp[0] if at_warp else blocked[0]
        if at_warp and at_bar:
            other = at_bar[0]
            what = (f"deadlock: {st.wait[0][0]} waits for lanes of its mask, but thread "
                    f"{tuple(other.idx)} waits at syncthreads() at line {other.wait[1]}")
            cls = WarpOpError
        else:
            what = "deadlock: every remaining thread of the block is blocked"
            cls = DeadlockError
        err = cls(f"{where(self.name, st.wait[2], st.wait[1], self.bidx, st.idx)}: {what}",
                  kernel=self.name, filename=st.wait[2], line=st.wait[1],
                  block=tuple(self.bidx), thread=tuple(st.idx))
        raise err  # a deadlock cannot be downgraded: the block cannot continue

    def _no_progress(self):
        st = self.cur
        frame = st.glet.gr_frame if st.glet is not None else None
        while frame is not None and frame.f_code.co_filename == __file__:
            frame = frame.f_back  # the student's frame that called the yielding operation
        fn = frame.f_code.co_filename if frame is not None else self.launch.kernel.filename
        line = frame.f_lineno if frame is not None else self.launch.kernel.firstlineno
        raise DeadlockError(
            f"{where(self.name, fn, line, self.bidx, st.idx)}: no forward progress: threads "
            f"spin waiting for something that never happens (a lock never released, a flag "
            f"never set; blocks run one after another, so a block cannot wait for a later "
            f"one)", kernel=self.name, filename=fn, line=line, block=tuple(self.bidx),
            thread=tuple(st.idx))
