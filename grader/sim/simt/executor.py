"""Entry point of the lockstep executor: `run_simt(kernel, config, args, instrument)`.

The grid runs in batches of whole blocks (blocks are independent, so any grouping is valid);
each batch is one call of the transformed kernel over all its lanes. A `Ctx` is the state of one
batch: lane geometry, the mask stack, the shared arrays of its blocks.
"""

from __future__ import annotations

import os

import numpy as np

from ..ast_tools import parse_function
from .. import frozen
from ..geometry import WARP
from . import typing as simt_typing
from .arrays import ArrayOps, global_array
from .atomics import AtomicOps
from .collective import CollectiveOps
from .compaction import Compaction
from .mask import Frame, MaskStack
from .ops import Ops
from .transform import Transformer
from .unsupported import SimtUnsupported
from ..bounded import BoundedCache

BATCH_LANES = 1 << 15  # lanes per batch: big enough that numpy dominates Python overhead

_compiled = BoundedCache(512)


def compile_function(py_func, argtypes: tuple, kind: str):
    """(generated function, return dtype) of `py_func` for `argtypes`; cached."""
    key = (py_func, argtypes, kind)
    hit = _compiled.get(key)
    if hit is None:
        types = simt_typing.infer(py_func, argtypes)
        fn = Transformer(py_func, types, kind, frozen.constants(py_func, argtypes)).build()
        hit = _compiled[key] = (fn, simt_typing.as_dtype(types.return_type))
    return hit


def _py_func(kernel):
    """The original Python function of a dispatcher, a `KernelSource` or a function."""
    kernel = getattr(kernel, "dispatcher", kernel)
    return getattr(kernel, "py_func", kernel)


def _holds_array(value) -> bool:
    return isinstance(value, np.ndarray) or isinstance(value, tuple) and \
        any(_holds_array(v) for v in value)


def _argument(value):
    if hasattr(value, "flat") and hasattr(value, "estrides"):  # a DeviceBuffer
        return global_array(value)
    if isinstance(value, np.ndarray) and value.ndim:
        raise SimtUnsupported("a host array argument the launcher did not turn into a buffer")
    if isinstance(value, tuple) and _holds_array(value):
        # typed from its elements it would not be the type numba gives it: no typing refusal
        raise SimtUnsupported("a tuple argument holding arrays")
    if isinstance(value, (bool, int, float, complex)):
        return np.asarray(value)[()]
    return value


def _located(exc: SimtUnsupported, filename: str) -> SimtUnsupported:
    """`exc` naming `filename` too, when it names a line only (raised while running)."""
    if type(exc) is SimtUnsupported and exc.filename is None and exc.line is not None:
        return SimtUnsupported(exc.feature, exc.line, filename)
    return exc


def _def_line(py_func) -> int:
    """The line of `def` (co_firstlineno is the first decorator's)."""
    try:
        tree, _ = parse_function(py_func)
        return tree.body[0].lineno
    except Exception:  # no source, or not a plain definition
        return py_func.__code__.co_firstlineno


def prepare(kernel, args) -> tuple:
    """Transform (or fetch) the kernel for these arguments; raises SimtUnsupported. Lets the
    launcher decide on a fallback before any memory is touched."""
    py_func = _py_func(kernel)
    sim_args = []
    for k, a in enumerate(args):
        try:
            sim_args.append(_argument(a))
        except SimtUnsupported as exc:  # name the parameter and the kernel's definition
            code = py_func.__code__
            name = code.co_varnames[k] if k < code.co_argcount else str(k)
            raise SimtUnsupported(f"{exc.feature} (parameter {name!r})", _def_line(py_func),
                                  code.co_filename) from None
    sim_args = tuple(sim_args)
    argtypes = tuple(simt_typing.type_of(a) for a in sim_args)
    fn, _ = compile_function(py_func, argtypes, "kernel")
    return fn, sim_args


def run(launch) -> None:
    """The launcher's entry point (`launch.Launch`): run it, or raise SimtUnsupported with no
    side effect (argument memory is restored if lockstep gives up midway)."""
    fn, sim_args = prepare(launch.kernel, launch.args)
    saved: dict = {}  # allocations written so far: (handle, store copy, flags copies)
    try:
        _execute(fn, sim_args, launch.config, launch.instrument, launch.device_limits, saved,
                 getattr(launch, "cooperative", False))
    except SimtUnsupported:
        for handle, flat, init, stored in saved.values():
            handle.flat[...] = flat
            handle.initialised[...] = init
            if stored is not None:
                handle.stored[...] = stored
        raise


def run_simt(kernel, config, args, instrument) -> None:
    """Run one launch in lockstep. `kernel`: a CUDA dispatcher, `KernelSource` or function;
    `config`: `geometry.LaunchConfig`; `args`: `DeviceBuffer`s and numpy scalars in parameter
    order; `instrument`: the launch's `memory.Instrument`. Raises `SimtUnsupported` (before
    running anything) for what lockstep cannot model, and `SimError`s for findings."""
    fn, sim_args = prepare(kernel, args)
    _execute(fn, sim_args, config, instrument)


_malloc_tuned = False


def tune_malloc() -> None:
    """For a process that is the simulator's own (the device process, a runner, a benchmark),
    called at its start, never by a launch: a library call does not change the whole process.

    Keep numpy's lane-sized temporaries in the heap. Every statement allocates and frees
    vectors of 128 KiB to a few MiB; with glibc's defaults each such block goes back to the
    kernel when freed (mmap from 128 KiB up, the heap trimmed once 128 KiB lie free at its top),
    so the next statement's vectors page-fault afresh (measured: 1,700 minor faults per warm
    tiled-matmul-128 launch, 15-20% of its time; 0 after). Once per process, on glibc, unless
    the environment sets these thresholds itself; it changes no result, only how much freed
    memory the process keeps (at most 64 MiB at the top of the heap)."""
    global _malloc_tuned
    if _malloc_tuned:
        return
    _malloc_tuned = True
    if any(os.environ.get(v) for v in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                                       "MALLOC_TOP_PAD_")):
        return
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
        mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    except (OSError, AttributeError):  # not glibc-like (macOS has no mallopt)
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 32 << 20)
    mallopt(m_trim_threshold, 64 << 20)


def _execute(fn, sim_args, config, instrument, limits=None, saved=None,
             cooperative=False) -> None:
    filename = fn.__code__.co_filename
    tpb, n_blocks = config.threads_per_block, config.n_blocks
    # a cooperative launch (the kernel syncs the grid) is one batch: every block at once
    per_batch = n_blocks if cooperative else max(1, min(n_blocks, BATCH_LANES // tpb))
    with np.errstate(all="ignore"):
        for first in range(0, n_blocks, per_batch):
            ctx = Ctx(config, instrument, first, min(per_batch, n_blocks - first), filename,
                      limits)
            ctx.saved = saved
            try:
                fn(ctx, *sim_args)
            except SimtUnsupported as exc:
                raise _located(exc, filename) from exc.__cause__
            ctx.finish_barriers()


class _Geometry:
    """The lane layout of a batch of `n_blocks` blocks, the same for every batch of that size
    (shared between batches: never written)."""

    def __init__(self, tpb: int, wpb: int, n_blocks: int):
        n = n_blocks * tpb
        self.lane = np.arange(n, dtype=np.int64)
        self.block_in_batch = np.repeat(np.arange(n_blocks, dtype=np.int64), tpb)
        self.thread = np.tile(np.arange(tpb, dtype=np.int64), n_blocks)
        self.lane_in_warp = (self.thread % WARP).astype(np.int32)
        self.warp_base = self.lane - self.lane_in_warp
        self.warp_size = np.minimum(WARP, tpb - (self.thread - self.lane_in_warp))
        self.warp_of = self.block_in_batch * wpb + self.thread // WARP
        self.warp_starts = (np.arange(n_blocks, dtype=np.int64)[:, None] * tpb +
                            np.arange(wpb, dtype=np.int64)[None, :] * WARP).reshape(-1)
        for value in vars(self).values():
            value.flags.writeable = False


_geometries: dict = {}


def _geometry(tpb: int, wpb: int, n_blocks: int) -> _Geometry:
    key = (tpb, wpb, n_blocks)
    geo = _geometries.get(key)
    if geo is None:
        if len(_geometries) >= 8:
            _geometries.clear()
        geo = _geometries[key] = _Geometry(tpb, wpb, n_blocks)
    return geo


class Ctx(MaskStack, Compaction, Ops, ArrayOps, AtomicOps, CollectiveOps):
    """One batch of blocks: what generated code calls as `__c`."""

    def __init__(self, config, instrument, first_block: int, n_blocks: int, filename: str,
                 limits=None):
        self.config, self.inst, self.limits = config, instrument, limits
        self.first_block, self.n_blocks = first_block, n_blocks
        self.tpb = tpb = config.threads_per_block
        self.n = n = n_blocks * tpb
        self.filename, self.line = filename, 0
        geo = _geometry(tpb, config.warps_per_block, n_blocks)
        self.block_ids = np.arange(first_block, first_block + n_blocks, dtype=np.int64)
        self.block = geo.block_in_batch + first_block
        # warps: runs of up to 32 lanes of one block
        self.lane, self.thread, self.lane_in_warp = geo.lane, geo.thread, geo.lane_in_warp
        self.warp_base, self.warp_size = geo.warp_base, geo.warp_size
        self.warp_of, self.warp_starts = geo.warp_of, geo.warp_starts
        self._dims: dict = {}
        self._arrays: dict = {}
        self._const_arrays: dict = {}
        self._dynamic = None
        self._static_bytes = 0
        self._shared_top = 0
        self._act_mask = None
        self._act = None
        self._act_lanes = None  # the instrument's Lanes of _act, and of every lane
        self._all_lanes = None
        self._calls: list = []
        self._skipped: list = []  # lanes that skipped a barrier: (lanes, lanes there, line, file)
        self.saved = None
        self.init_masks()
        self.init_compaction()

    # --- special registers ----------------------------------------------------------------------

    def dim(self, name: str, axis: str):
        key = (name, axis)
        value = self._dims.get(key)
        if value is None:
            k = "xyz".index(axis)
            cfg = self.config
            if name == "blockDim":
                value = np.int32(cfg.block[k])
            elif name == "gridDim":
                value = np.int32(cfg.grid[k])
            elif (cfg.block if name == "threadIdx" else cfg.grid)[k] == 1:
                value = np.int32(0)
            elif name == "threadIdx":
                bx, by, bz = cfg.block
                value = self.thread if by == bz == 1 else \
                    (self.thread % bx, self.thread // bx % by, self.thread // (bx * by))[k]
            else:
                gx, gy, gz = cfg.grid
                value = self.block if gy == gz == 1 else \
                    (self.block % gx, self.block // gx % gy, self.block // (gx * gy))[k]
            if isinstance(value, np.ndarray):
                value = value.astype(np.int32)
                if name == "blockIdx" and self.n_blocks == 1 or name == "threadIdx" and \
                        cfg.block[k] == 1:
                    value = np.int32(value[0])  # uniform over the batch
            self._dims[key] = value
        return value

    def dim3(self, name: str):
        """`cuda.blockIdx` (etc.) as a value: its (x, y, z)."""
        return tuple(self.dim(name, axis) for axis in "xyz")

    def grid(self, ndim):
        # numba: blockIdx * blockDim + threadIdx, int32 operands computed in int64
        out = tuple(self.binop("Add", self.binop("Mult", self.dim("blockIdx", a),
                                                 self.dim("blockDim", a)), self.dim("threadIdx", a))
                    for a in "xyz"[:int(ndim)])
        return out[0] if int(ndim) == 1 else out

    def gridsize(self, ndim):
        out = tuple(np.int64(self.config.block[k]) * np.int64(self.config.grid[k])
                    for k in range(int(ndim)))
        return out[0] if int(ndim) == 1 else out

    # --- device functions -----------------------------------------------------------------------

    def call_value(self, fn, need_old, *args):
        """A call of a local holding a function or a type (a device function's parameter)."""
        intrinsic = getattr(fn, "intrinsic", None)
        if intrinsic is not None and intrinsic.kind == "atomic":
            return self.atomic(intrinsic.name, need_old, *args)
        if isinstance(fn, np.dtype) and len(args) == 1:  # `dtype(x)`: a cast
            return self.cast(args[0], fn)
        if hasattr(fn, "py_func"):
            return self.call(fn, *args)
        raise SimtUnsupported("call of a function passed as a value", self.line)

    def call(self, dispatcher, *args, argtypes=None):
        """A device function; `argtypes`: numba's types of the arguments where some are
        functions or types (from the caller's typing), else typed from the values."""
        if dispatcher in self._calls:
            raise SimtUnsupported(f"recursion in device function {dispatcher.py_func.__name__!r}",
                                  self.line)
        if argtypes is None:
            argtypes = tuple(simt_typing.type_of(a) for a in args)
        fn, result_dtype = compile_function(dispatcher.py_func, argtypes, "device")
        frame = Frame(base=len(self.levels), result_dtype=result_dtype)
        self.levels.append(self.levels[-1])
        self.conds.append(None)
        self.frames.append(frame)
        self._calls.append(dispatcher)
        line, filename = self.line, self.filename
        self.filename = fn.__code__.co_filename
        compacted, loops = len(self._compactions), len(self._iterations)
        try:
            fn(self, *args)
        except SimtUnsupported as exc:  # raised in the device function's file
            raise _located(exc, self.filename) from exc.__cause__
        finally:
            if len(self._compactions) > compacted:  # returned from inside a compacted loop
                self.unwind_compactions(compacted)
            self.drop_loops(loops)
            self.line, self.filename = line, filename
            self._calls.pop()
            self.frames.pop()
            del self.levels[frame.base:], self.conds[frame.base:]
        return frame.result
