"""Lane compaction: a divergent loop runs on the vector of its active lanes only.

A `while` loop whose lanes finish at different times (Collatz: a few lanes loop for hundreds of
iterations after most have left) would otherwise compute every statement over the whole batch,
mostly for inactive lanes. When at most half of the batch still runs an iteration, the
loop's lanes are gathered once: the lane geometry (block, thread, lane ids, warps), every level
of the mask stack, the live lanes, pending function results and the loop's locals become short
vectors over those lanes (positions `idx` in the vectors before), and the loop goes on over
them; it may compact again as more lanes leave. When the loop ends the locals are scattered
back over the values they had when compacted (lanes outside `idx` did not run the loop since),
and the geometry is restored. Results, findings and counters do not change: the instrument
sees the same lanes (block and thread ids) in the same order, grouped into the same warps.

The transform compacts only loops whose body uses no lane-position-dependent operation (warp
collectives, barriers: they index lanes by their position in the batch) and calls no device
function that might (`may_compact`). Generated code:

    while True:
        ...loop test...
        if __c.compact_due():
            (x, y) = __c.compact((x, y))      # every local and parameter of the function
        ...body...
    (x, y) = __c.expand((x, y))               # undoes this loop's compactions, if any
    __c.loop_pop()
"""

from __future__ import annotations

import numpy as np

# compact when at most 1/SHARE of the lanes runs an iteration (measured on Collatz 2^16, CPU
# time: 1/2 90 ms, 1/4 110 ms; gathering costs less than one iteration over the batch),
# and only vectors at least this long (below, numpy's per-call overhead dominates anyway)
SHARE = 2
MIN_LANES = 512
# the Ctx attributes that hold one entry per lane
LANE_FIELDS = ("block", "thread", "lane", "lane_in_warp", "warp_base", "warp_size", "warp_of")


class _Compacted:
    """One compaction: where it happened and what to restore."""

    __slots__ = ("loop", "idx", "saved", "levels", "conds", "live", "results", "values", "n")

    def __init__(self, loop, idx, saved, levels, conds, live, results, values, n):
        self.loop, self.idx, self.saved = loop, idx, saved
        self.levels, self.conds, self.live, self.results = levels, conds, live, results
        self.values, self.n = values, n


class Compaction:
    """Mixin of `Ctx`: the compaction stack and the calls generated loops make."""

    n: int

    def init_compaction(self):
        self._compactions: list[_Compacted] = []

    def compact_due(self) -> bool:
        """After the loop test: few enough lanes run this iteration to compact them."""
        m = self.levels[-1]
        if m is None or self.n < MIN_LANES:
            return False
        k = int(np.count_nonzero(m))
        return 0 < k and k * SHARE <= self.n

    def compact(self, values: tuple) -> tuple:
        """Gather the running lanes of the loop (its L level); `values` (the function's locals)
        gathered the same way."""
        loop = len(self.levels) - 2  # the loop's L level (lanes still in the loop)
        idx = np.flatnonzero(self.levels[-1])
        n = self.n
        entry = _Compacted(loop, idx, {f: getattr(self, f) for f in LANE_FIELDS},
                           list(self.levels), list(self.conds), self.live,
                           [f.result for f in self.frames], values, n)
        self._compactions.append(entry)
        for f in LANE_FIELDS:
            setattr(self, f, getattr(self, f)[idx])
        self.n = idx.shape[0]
        self.levels = [self._gather(m, idx, n) for m in self.levels]
        self.conds = [self._gather(c, idx, n) for c in self.conds]
        self.live = self._gather(self.live, idx, n)
        for f in self.frames:
            f.result = self._gather(f.result, idx, n)
        self._lanes_changed()
        return tuple(self._gather(v, idx, n) for v in values)

    def expand(self, values: tuple) -> tuple:
        """At the end of a loop: undo its compactions (innermost first), scattering `values`."""
        loop = len(self.levels) - 2
        while self._compactions and self._compactions[-1].loop == loop:
            values = self._expand_one(values)
        return values

    def unwind_compactions(self, depth: int) -> None:
        """A function returned from inside compacted loops: restore the lanes of the caller
        (its locals are gone; pending results and the mask stack are scattered back)."""
        while len(self._compactions) > depth:
            entry = self._compactions[-1]
            del self.levels[len(entry.levels):], self.conds[len(entry.conds):]
            self._expand_one(None)

    def _expand_one(self, values):
        e = self._compactions.pop()
        idx, n = e.idx, e.n
        self.levels = [self._spread(old, new, idx, n, True)
                       for old, new in zip(e.levels, self.levels)]
        self.conds = [self._spread(old, new, idx, n, True)
                      for old, new in zip(e.conds, self.conds)]
        self.live = self._spread(e.live, self.live, idx, n, True)
        for f, old in zip(self.frames, e.results):
            f.result = self._spread(old, f.result, idx, n)
        for f in LANE_FIELDS:
            setattr(self, f, e.saved[f])
        self.n = n
        self._lanes_changed()
        if values is None:
            return None
        return tuple(self._spread(old, new, idx, n) for old, new in zip(e.values, values))

    def _lanes_changed(self):
        """Caches over the lanes start afresh (special registers, active-lane records)."""
        self._dims = {}
        self._empty = np.zeros(self.n, bool)
        self._act_mask = self._act = self._act_lanes = self._all_lanes = None

    def _gather(self, value, idx, n):
        if isinstance(value, np.ndarray):
            return value[idx] if value.ndim == 1 and value.shape[0] == n else value
        if isinstance(value, tuple):
            return tuple(self._gather(v, idx, n) for v in value)
        consts = getattr(value, "consts", None)  # a view: its per-lane offsets and lengths
        if consts is not None:
            return value.like(tuple(self._gather(c, idx, n) for c in consts),
                              tuple(self._gather(d, idx, n) for d in value.shape))
        return value

    def _spread(self, old, new, idx, n, mask=False):
        """`new` (over the compacted lanes) at `idx`, `old` (over all n) elsewhere. `mask`:
        a mask-stack level, None meaning every lane."""
        if new is old:
            return old
        if mask:
            if new is None and old is None:
                return None
            full = np.ones(n, bool) if old is None else old.copy()
            full[idx] = True if new is None else new
            return full
        if isinstance(new, tuple):
            olds = old if isinstance(old, tuple) and len(old) == len(new) else (None,) * len(new)
            return tuple(self._spread(o, v, idx, n) for o, v in zip(olds, new))
        consts = getattr(new, "consts", None)
        if consts is not None:
            same = getattr(old, "consts", None) is not None and old.dims == new.dims
            olds = old.consts if same else (None,) * len(consts)
            shapes = old.shape if same else (None,) * len(new.shape)
            return new.like(tuple(self._spread(o, c, idx, n) for o, c in zip(olds, consts)),
                            tuple(self._spread(o, d, idx, n) for o, d in zip(shapes, new.shape)))
        is_vector = isinstance(new, np.ndarray) and new.ndim == 1 and new.shape[0] == idx.shape[0]
        if not (is_vector or isinstance(new, np.generic)):
            return new  # an array, None, a Python value: the same for every lane
        full = np.zeros(n, new.dtype)
        if old is not None and not hasattr(old, "numba_type") and not isinstance(old, tuple):
            full[...] = old
        full[idx] = new
        return full
