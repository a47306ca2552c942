"""Barriers and warp-level operations over the lanes of a batch.

Lanes are laid out block after block, thread id within the block (x fastest): a warp is a run
of up to 32 consecutive lanes of one block (the last warp of a block may be partial). Shuffles
are index permutations within warps; votes reduce each warp with `ufunc.reduceat`.
"""

from __future__ import annotations

import numpy as np

from ..checks.findings import different_barriers, exited_before_barrier, unreadable_lane_hint
from ..errors import BarrierDivergenceError, WarpOpError, where
from .unsupported import SimtUnsupported

WARP = 32
_FULL = np.uint32(0xFFFFFFFF)


class _GridGroup:
    """The value of `cuda.cg.this_grid()` (only its `sync()` is used, by the transform)."""

    @property
    def numba_type(self):
        from numba.cuda.types import grid_group

        return grid_group


_GRID = _GridGroup()


class CollectiveOps:
    """Mixin of `Ctx`: syncthreads and friends, fences, warp shuffles, votes and matches."""

    # --- barriers ------------------------------------------------------------------------------

    def _barrier(self, kind):
        """Complete a barrier for every block with an active lane. Live lanes of such a block
        that are not here are judged once it is known where they go (as the per-thread
        executor sees them): to another syncthreads() (`_arrive`) or off the end of the kernel
        (`finish_barriers`); to the same one in a later iteration, or through an explicit
        `return`, is no finding."""
        top, live = self.levels[-1], self.live
        if self._skipped:
            self._arrive(top)
        if top is None:
            blocks = self.block_ids
        else:
            active = top.reshape(self.n_blocks, self.tpb)
            here = active.any(axis=1)
            alive = np.ones_like(active) if live is None else live.reshape(active.shape)
            missing = here & (active != alive).any(axis=1)
            if missing.any():
                away = (alive & ~active & missing[:, None]).reshape(-1)
                self._skipped.append((away, top, self.line, self.filename))
            blocks = self.block_ids[here]
        self.inst.barrier(blocks, self.line)
        return blocks

    def _arrive(self, top):
        """Lanes that skipped an earlier barrier reach this one: at another line they wait at
        two different barriers (the finding names the later line, as the per-thread executor
        does); at the same line, they caught up."""
        here = np.ones(self.n, bool) if top is None else top
        for k, (away, there, line, filename) in enumerate(self._skipped):
            came = away & here
            if not came.any():
                continue
            if (line, filename) == (self.line, self.filename):
                self._skipped[k] = (away & ~came, there, line, filename)
                continue
            (f1, l1), (f2, l2) = sorted([(filename, line), (self.filename, self.line)])
            b = int(np.argmax(came)) // self.tpb
            waiting = came if (f2, l2) == (self.filename, self.line) else there
            t = int(np.argmax(waiting.reshape(self.n_blocks, self.tpb)[b]))
            self._skipped = []
            self._report(BarrierDivergenceError, different_barriers(f"{f1}:{l1}", f"{f2}:{l2}"),
                         b, t, line=l2, filename=f2)
            return
        self._skipped = [r for r in self._skipped if r[0].any()]

    def finish_barriers(self):
        """At the end of the kernel: lanes that skipped a barrier and ran off the end without
        returning (`return` first is no finding, as in the per-thread executor)."""
        for away, there, line, filename in self._skipped:
            fell = away if self.live is None else away & self.live
            if fell.any():
                lane = int(np.argmax(fell))
                b = lane // self.tpb
                waiting = int(there.reshape(self.n_blocks, self.tpb)[b].sum())
                self._skipped = []
                self._report(BarrierDivergenceError,
                             exited_before_barrier(f"{filename}:{line}", waiting), b,
                             int(self.thread[lane]), line=line, filename=filename)
                return
        self._skipped = []

    def _report(self, cls, what, block_in_batch, thread, line=None, filename=None):
        block = self.first_block + block_in_batch
        b, t = self.config.block_xyz(block), self.config.thread_xyz(thread)
        line = self.line if line is None else line
        filename = filename or self.filename
        err = cls(f"{where(self.inst.kernel, filename, line, b, t)}: {what}",
                  kernel=self.inst.kernel, filename=filename, line=line, block=b, thread=t)
        self.inst.checks.report(err, self.inst.warnings)

    def syncthreads(self):
        self._barrier("syncthreads()")

    # --- cooperative groups: the grid group ----------------------------------------------------

    def this_grid(self):
        return _GRID

    def grid_sync(self):
        """`this_grid().sync()`: every live lane of the grid here (a cooperative launch runs
        as one batch), and every block still running; then memory is ordered across blocks."""
        if self.n_blocks != self.config.n_blocks:
            raise SimtUnsupported("a grid sync in a launch not run as one batch", self.line)
        top, live = self.levels[-1], self.live
        alive = np.ones(self.n, bool) if live is None else live
        if top is not None:
            missing = alive & ~top
            if missing.any():
                b, t = divmod(int(np.argmax(missing)), self.tpb)
                self._report(BarrierDivergenceError,
                             f"grid sync reached by only some threads of the grid (thread "
                             f"{self.config.thread_xyz(t)} of this block skips it, e.g. in "
                             "another branch or loop iteration): CUDA requires every thread of "
                             "the grid to call it; on current GPUs it completes if the threads "
                             "that skip it exit, and hangs if they wait elsewhere", b, t)
        gone = ~alive.reshape(self.n_blocks, self.tpb).any(axis=1)
        if gone.any():
            b = int(np.argmax(gone))
            self._report(BarrierDivergenceError,
                         "every thread of this block finished the kernel without reaching the "
                         "grid sync that the other blocks wait at: a grid sync waits for every "
                         "block, so on a GPU the grid would wait forever", b, 0)
        self.inst.grid_sync(self.line)

    def _block_reduce(self, kind, pred, reduce):
        self._barrier(kind)
        top = self.levels[-1]
        p = np.broadcast_to(np.asarray(pred) != 0, (self.n,))
        if top is not None:
            p = p & top
        per_block = reduce(p.reshape(self.n_blocks, self.tpb), axis=1)
        return np.repeat(per_block, self.tpb)

    def syncthreads_count(self, pred):
        return self._block_reduce("syncthreads_count()", pred, np.sum).astype(np.int32)

    def syncthreads_and(self, pred):
        top = self.levels[-1]
        p = np.asarray(pred) != 0
        if top is not None:  # lanes not here do not veto
            p = p | ~top
        return self._block_reduce("syncthreads_and()", p, np.all).astype(np.int32)

    def syncthreads_or(self, pred):
        return self._block_reduce("syncthreads_or()", pred, np.any).astype(np.int32)

    def threadfence(self):
        act, block, thread = self._lanes()
        self.inst.fence(block, thread)

    threadfence_system = threadfence

    def threadfence_block(self):
        pass

    def syncwarp(self, mask=_FULL):
        act, block, thread = self._lanes()
        warps = np.unique(block * self.config.warps_per_block + thread // WARP)
        wpb = self.config.warps_per_block
        for w in warps.tolist():
            self.inst.syncwarp(w // wpb, w % wpb)
        self.inst.warp_op("syncwarp", int(block.shape[0]), self.line, warps=len(warps))

    # --- warp geometry -------------------------------------------------------------------------

    def _active(self):
        top = self.levels[-1]
        return np.ones(self.n, bool) if top is None else top

    def laneid(self):
        return self.lane_in_warp

    def warpsize(self):
        return np.int32(WARP)

    def lanemask_lt(self):
        return ((np.uint32(1) << self.lane_in_warp.astype(np.uint32)) - np.uint32(1)).astype(np.uint32)

    def _live_bits(self):
        """Per lane: the bits of its warp's lanes that have not exited."""
        live = np.ones(self.n, bool) if self.live is None else self.live
        bits = np.where(live, np.uint32(1) << self.lane_in_warp.astype(np.uint32), np.uint32(0))
        return np.bitwise_or.reduceat(bits.astype(np.uint32), self.warp_starts)[self.warp_of]

    def _warp_bits(self, pred):
        """Per lane: the ballot (uint32) of `pred` over the active lanes of its warp."""
        bits = np.where(self._active() & (np.broadcast_to(pred, (self.n,)) != 0),
                        np.uint32(1) << self.lane_in_warp.astype(np.uint32), np.uint32(0))
        per_warp = np.bitwise_or.reduceat(bits.astype(np.uint32), self.warp_starts)
        return per_warp[self.warp_of]

    def activemask(self):  # reads the mask, exchanges nothing: no warp op (as per-thread)
        return self._warp_bits(True)

    def ballot_sync(self, mask, pred):
        self._warp_op("ballot_sync", mask)
        return (self._warp_bits(pred) & np.uint32(mask)).astype(np.int32)  # numba: int32

    def any_sync(self, mask, pred):
        self._warp_op("any_sync", mask)
        return (self._warp_bits(pred) & np.uint32(mask)) != 0

    def all_sync(self, mask, pred):
        self._warp_op("all_sync", mask)
        here = self._warp_bits(True) & np.uint32(mask)
        return (self._warp_bits(pred) & here) == here

    def eq_sync(self, mask, pred):
        self._warp_op("eq_sync", mask)
        here = self._warp_bits(True) & np.uint32(mask)
        ones = self._warp_bits(pred) & here
        return (ones == here) | (ones == 0)

    def match_any_sync(self, mask, value):
        """Per lane: the lanes of its warp (active, in mask) holding the same value."""
        self._warp_op("match_any_sync", mask)
        value = np.broadcast_to(value, (self.n,))
        key = np.where(self._active(), self.warp_of, -1)
        order = np.lexsort((value, key))
        ks, vs = key[order], value[order]
        new_group = np.ones(self.n, bool)
        new_group[1:] = (ks[1:] != ks[:-1]) | (vs[1:] != vs[:-1])
        group = np.cumsum(new_group) - 1
        bits = (np.uint32(1) << self.lane_in_warp[order].astype(np.uint32))
        group_bits = np.bitwise_or.reduceat(bits, np.flatnonzero(new_group))
        out = np.empty(self.n, np.uint32)
        out[order] = group_bits[group]
        return (out & np.uint32(mask)).astype(np.int32)

    def match_all_sync(self, mask, value):
        matches = self.match_any_sync(mask, value).astype(np.uint32)
        here = self._warp_bits(True) & np.uint32(mask)
        same = matches == here
        return np.where(same, here, np.uint32(0)).astype(np.int32), same

    def _count_op(self, name):
        """One op per warp with a lane executing it (partial warps of divergent code each
        count, as on the per-thread executor)."""
        active = self._active()
        warps = int(np.logical_or.reduceat(active, self.warp_starts).sum()) if self.n else 0
        self.inst.warp_op(name, int(active.sum()), self.line, warps=warps)

    def _warp_op(self, name, mask):
        self._count_op(name)
        # the live lanes named in `mask` must all be here (the caller among them); a live lane
        # that is elsewhere (another branch, another loop iteration) would deadlock the warp.
        # A mask per lane (`activemask()` in divergent code) is each lane's own: its warp's
        if isinstance(mask, np.ndarray) and mask.ndim:
            mask = (mask.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32)
        else:
            mask = np.uint32(int(mask) & 0xFFFFFFFF)
        active = self._active()
        here = self._warp_bits(True)
        live = here if self.live is None and self.levels[-1] is None else self._live_bits()
        own = np.uint32(1) << self.lane_in_warp.astype(np.uint32)
        bad = active & (((mask & live & ~here) != 0) | ((own & mask) == 0))
        if bad.any():
            lane = int(np.argmax(bad))
            lane_mask = int(mask[lane]) if mask.ndim else int(mask)
            if int(own[lane]) & lane_mask == 0:
                what = f"its own lane {int(self.lane_in_warp[lane])} is not in the mask"
            else:
                absent = lane_mask & int(live[lane]) & ~int(here[lane])
                what = (f"lane {(absent & -absent).bit_length() - 1} named in the mask is live "
                        "but not executing this op (diverged: call it where every lane named in the mask "
                        "runs, outside the `if`, with a neutral value such as 0 for lanes past the end; "
                        "or name only the lanes that run it, cuda.activemask())")
            self._report(WarpOpError, f"{name} with mask {lane_mask:#010x}: {what}",
                         lane // self.tpb, int(self.thread[lane]))

    # --- shuffles ------------------------------------------------------------------------------

    def _shuffle(self, name, mask, value, src, keep_own=None):
        """Each active lane reads `value` at lane `src` (of its warp); `keep_own` lanes keep
        their own value (shfl_up/down past the warp's edge)."""
        self._warp_op(name, mask)
        src = np.broadcast_to(np.asarray(src, np.int64), (self.n,)) & (WARP - 1)
        if keep_own is not None:
            src = np.where(keep_own, self.lane_in_warp, src)
        source = self.warp_base + src
        active = self._active()
        valid = src < self.warp_size  # a lane past a partial warp does not exist
        safe = np.where(valid, source, 0)
        readable = valid & active[safe]
        bad = active & ~readable
        if bad.any():
            lane = int(np.argmax(bad))
            self._report(WarpOpError,
                         f"{name} reads lane {int(src[lane])} of the warp, which is not "
                         "executing it (diverged, exited, or past the end of a partial warp): "
                         "the value is undefined" + unreadable_lane_hint(), lane // self.tpb,
                         int(self.thread[lane]))
        if not isinstance(value, np.ndarray) or value.ndim == 0:
            return value  # uniform: every lane holds it
        return value[safe]

    def shfl_sync(self, mask, value, src_lane):
        return self._shuffle("shfl_sync", mask, value, src_lane)

    def shfl_up_sync(self, mask, value, delta):
        src = self.lane_in_warp - np.asarray(delta, np.int64)
        return self._shuffle("shfl_up_sync", mask, value, src, keep_own=src < 0)

    def shfl_down_sync(self, mask, value, delta):
        src = self.lane_in_warp + np.asarray(delta, np.int64)
        return self._shuffle("shfl_down_sync", mask, value, src, keep_own=src >= WARP)

    def shfl_xor_sync(self, mask, value, lane_mask):
        src = self.lane_in_warp ^ np.asarray(lane_mask, np.int64)
        return self._shuffle("shfl_xor_sync", mask, value, src)

    # --- bit tricks ------------------------------------------------------------------------------

    def popc(self, x):
        x = np.asarray(x)
        unsigned = x.astype(np.dtype(f"u{x.dtype.itemsize}"))  # two's complement bits
        return np.bitwise_count(unsigned).astype(x.dtype)[()]  # numba: the argument's type

    def clz(self, x):
        x = np.asarray(x)
        width = x.dtype.itemsize * 8
        u = x.astype(np.dtype(f"u{x.dtype.itemsize}")).astype(np.uint64)
        n = np.zeros(u.shape, np.int32)
        for shift in range(width - 1, -1, -1):
            n = np.where((n == width - 1 - shift) & ((u >> np.uint64(shift)) & np.uint64(1) == 0),
                         n + 1, n)
        return n.astype(x.dtype)[()]

    def ffs(self, x):
        x = np.asarray(x).astype(np.int64)
        low = x & -x
        return np.where(x == 0, 0, np.log2(np.where(low == 0, 1, low)).astype(np.int32) + 1
                        ).astype(np.uint32)[()]

    def brev(self, x):
        # numba: uint32 or uint64 (narrower integers are widened to uint32)
        x = np.asarray(x)
        width = 64 if x.dtype.itemsize == 8 else 32
        u = x.astype(np.dtype(f"u{x.dtype.itemsize}")).astype(np.uint64)
        out = np.zeros(u.shape, np.uint64)
        for i in range(width):
            out |= ((u >> np.uint64(i)) & np.uint64(1)) << np.uint64(width - 1 - i)
        return out.astype(np.dtype(f"u{width // 8}"))[()]

    def fma(self, a, b, c):
        return self.binop("Add", self.binop("Mult", a, b), c)

    def cbrt(self, x):
        return np.cbrt(x)

    def selp(self, c, a, b):
        return np.where(c, a, b)[()]

