"""The `cuda` a kernel sees under the per-thread executor (`ThreadCuda`), one per launch.

Indices read the running thread from the executor (`ex.cur`, set before each switch: explicit
context, no thread-local lookups); barriers and warp collectives block through it
(`ex.sync`, `ex.block_on`); atomics read-modify-write in place, then yield, so that spin loops
make progress; `cuda.shared` / `cuda.const` declare arrays in the executor's `Spaces`.
Anything else of numba.cuda raises NotSimulatedError naming it (types pass through).
"""

from __future__ import annotations

import sys
import types

import numpy as np

from .. import device_math, patching
from ..errors import NotSimulatedError, SimError, where
from ..host import _as_dtype
from ..memory import WARP, LocalArray
from .arrays import Spaces, ThreadArray
from .block import Dim3

FULL_MASK = 0xFFFFFFFF


class _Shared:
    def __init__(self, spaces):
        self._spaces = spaces

    def array(self, shape, dtype):
        return self._spaces.shared_array(shape, dtype, sys._getframe(1))


class _Local:
    def __init__(self, ex):
        self._ex = ex
        # (shape, dtype) as the kernel wrote them -> the first such array: every thread makes its
        # own, and a copy of that one's layout costs a third of reading shape and type again
        # (a grid-stride kernel's 270,336 threads made two each in 60 s)
        self._first: dict = {}

    def array(self, shape, dtype):
        frame = sys._getframe(1)
        # per declaration: each is named after its own variable (the uninitialised-read message)
        key = (shape, dtype, id(frame.f_code), frame.f_lasti)
        try:
            first = self._first.get(key)
        except TypeError:  # a shape given as a list: made afresh each time
            first = key = None
        if first is not None:
            return first.fresh_local()
        made = ThreadArray(LocalArray(Spaces.name_at(frame, "local array"),
                                      (shape,) if np.ndim(shape) == 0 else tuple(shape), _as_dtype(dtype)),
                           "local", self._ex)
        if key is not None and made.__class__ is ThreadArray:  # (an array of records: made afresh)
            self._first[key] = made
        return made


class _Const:
    def __init__(self, spaces):
        self._spaces = spaces

    def array_like(self, ary):
        return self._spaces.const_array(ary)

    def frozen(self, data, name):
        """A global or closure array numba froze into the kernel (read-only, not copied)."""
        return self._spaces.frozen_array(data, name)


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


class _GridGroup:
    """What `cuda.cg.this_grid()` returns: `sync()` is a barrier of every thread of the grid
    (the launch is cooperative: the executor runs all its blocks at once)."""

    __slots__ = ("_ex",)

    def __init__(self, ex):
        self._ex = ex

    def sync(self):
        self._ex.grid_sync(sys._getframe(1))


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
        "cbrt", "selp", "nanosleep", "fp16", "cg",
    )
    # cuda.fp16: half-precision intrinsics (the same functions as the SIMT executor's)
    fp16 = types.SimpleNamespace(**device_math.FP16)

    def __init__(self, ex):
        self._ex = ex
        self.shared = _Shared(ex.spaces)
        self.local = _Local(ex)
        self.const = _Const(ex.spaces)
        self.atomic = _Atomic(ex)
        self.warpsize = WARP
        self.blockDim = Dim3(*ex.config.block)
        self.gridDim = Dim3(*ex.config.grid)
        # a submodule of numba.cuda as the kernel sees it (`cuda.random.xoroshiro128p_...`):
        # set by kernel_source.rebind, which rebinds its jitted functions
        self.submodule = None
        grid = _GridGroup(ex)
        self.cg = types.SimpleNamespace(this_grid=lambda: grid)  # cooperative groups

    threadIdx = property(lambda self: self._ex.cur.idx)
    blockIdx = property(lambda self: self._ex.bidx)
    laneid = property(lambda self: self._ex.cur.lane)

    def __getattr__(self, name):
        real = getattr(patching.cuda_module(), name)
        if isinstance(real, types.ModuleType) and self.submodule is not None:
            view = self.submodule(real)  # (None: it gives the kernel no jitted function)
            if view is not None:
                return view
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
